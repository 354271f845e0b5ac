"""Movie export: recordings to MP4, WebM, GIF or PNG frames, streamed and atomic.

No Qt here: the command line, scripts and the app's export dialog all call
:func:`export_recording`; :func:`export_state` exports what a viewer state shows.
"""

from flyviz.errors import ExportCancelled
from flyviz.export.movie import export_recording, export_state, recording_scale
from flyviz.export.options import ExportOptions, movie_format

__all__ = ["ExportCancelled", "ExportOptions", "export_recording", "export_state", "movie_format",
           "recording_scale"]
