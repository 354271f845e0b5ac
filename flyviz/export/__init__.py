"""Movie export: recordings to MP4, WebM, GIF or PNG frames, streamed and atomic.

No Qt here: the command line, scripts and the app's export dialog all call
:func:`export_recording`; :func:`export_state` exports what a viewer state shows;
:func:`export_flow` makes a movie of a trace's flow view (its lag sweep).
"""

from flyviz.errors import ExportCancelled
from flyviz.export.flow import export_flow
from flyviz.export.movie import export_recording, export_state, recording_scale
from flyviz.export.options import ExportOptions, movie_format

__all__ = ["ExportCancelled", "ExportOptions", "export_flow", "export_recording", "export_state",
           "movie_format", "recording_scale"]
