"""``flyviz gui``: open the desktop app (what plain ``flyviz`` does)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from collections.abc import Callable
from functools import partial
from typing import Any

from flyviz.commands._options import add_dataset_option
from flyviz.model.errors import InputError

#: ``flyviz gui --gl`` choices.
GL_CHOICES = ("auto", "software")


#: Qt platforms that need no window system (``QT_QPA_PLATFORM``).
HEADLESS_PLATFORMS = ("offscreen", "minimal", "vnc", "eglfs", "linuxfb", "vkkhrdisplay")


def check_display(environ: Any = None, platform: str = sys.platform) -> None:
    """Refuse in one line, before Qt starts, to open the window where there is no screen.

    On Linux without ``DISPLAY`` or ``WAYLAND_DISPLAY`` Qt's window-system plugin aborts
    the process (exit 134, a paragraph about ``xcb-cursor0``), whatever is wrong; a
    ``QT_QPA_PLATFORM`` that draws without one (``offscreen``...) is left to Qt.

    Raises
    ------
    InputError
        Saying how to get a screen (``xvfb-run``) or what works without one.
    """
    import os

    environ = os.environ if environ is None else environ
    if not platform.startswith("linux"):
        return
    chosen = environ.get("QT_QPA_PLATFORM", "").split(":")[0].strip().lower()
    if chosen in HEADLESS_PLATFORMS:
        return
    if environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return
    raise InputError("the window needs a display and none is set (DISPLAY and WAYLAND_DISPLAY "
                     "are empty): run it on a desktop, over ssh -X, or under a virtual screen "
                     "(xvfb-run -a flyviz ...); the command-line commands (generate, export, "
                     "share) need none")


def use_gl(choice: str) -> None:
    """Choose the app's OpenGL before Qt starts (``--gl``).

    ``software`` asks Mesa for its CPU renderer (``LIBGL_ALWAYS_SOFTWARE``,
    read when the first OpenGL context is made) and Qt for its software
    OpenGL where it ships one (Windows); ``auto`` leaves both to the system.
    """
    if choice == "software":
        import os

        from PySide6.QtCore import QCoreApplication, Qt

        os.environ["LIBGL_ALWAYS_SOFTWARE"] = "1"
        QCoreApplication.setAttribute(Qt.ApplicationAttribute.AA_UseSoftwareOpenGL)


def _size(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"size {text!r} must look like 1280x800")
    width, height = int(match.group(1)), int(match.group(2))
    if width > 16384 or height > 16384:
        raise argparse.ArgumentTypeError(f"size {width}x{height} is too large: at most "
                                         "16384x16384")
    if width < 320 or height < 240:
        raise argparse.ArgumentTypeError(f"size {width}x{height} is too small: at least 320x240")
    return width, height


def configure(parser: argparse.ArgumentParser) -> None:
    """Options of ``flyviz gui``."""
    parser.add_argument("spec", nargs="?", metavar="SPEC",
                        help="model folder, Hugging Face repo id or 'demo', as the other "
                             "commands take it (the same as --model), e.g. flyviz gui demo")
    parser.add_argument("--model", default="demo", metavar="SPEC",
                        help="model folder, Hugging Face repo id or 'demo' (default: demo)")
    add_dataset_option(parser)
    parser.add_argument("--prompt", metavar="TEXT",
                        help="start running this prompt as soon as the model is loaded")
    parser.add_argument("--size", type=_size, metavar="WxH",
                        help="window size in pixels, e.g. 1600x1000")
    parser.add_argument("--recording", metavar="FILE",
                        help="open this recording (.flyrec) once the model is loaded")
    parser.add_argument("--atlas", metavar="PATH",
                        help="open this neuron atlas (made with 'flyviz atlas' for the same "
                             "model) once the model is loaded, e.g. --atlas stories.atlas; "
                             "the demo brain opens its own")
    parser.add_argument("--mesh", metavar="FILE", action="append", type=Path,
                        help="draw a mesh (.obj, .ply, .stl: a brain outline or neuropils, in "
                             "the model's micrometres) behind the neurons; repeatable; needs "
                             "flyviz[meshes]")
    parser.add_argument("--outline", action="store_true",
                        help="start with the brain's outline (View → Brain outline, O) shown")
    parser.add_argument("--lesion-map", metavar="PATH",
                        help="open this lesion map (a .csv or .parquet made with 'flyviz sweep' "
                             "for the same model) once the model is loaded, colour the brain "
                             "by importance and list its groups")
    parser.add_argument("--gl", choices=GL_CHOICES, default="auto",
                        help="OpenGL for the brain view, screenshots and movies: auto (the "
                             "system's, default) or software (Mesa's llvmpipe on the CPU: "
                             "slower, for a missing or broken graphics driver or a remote "
                             "desktop; the same as LIBGL_ALWAYS_SOFTWARE=1), e.g. --gl software")
    parser.epilog = ("keys: Space play/pause, ←/→ step, Home/End jump, 1/2/3 views, Alt+S "
                     "screenshot, F1 lists every shortcut")


def _loader_with_dataset(model: str, dataset: Any) -> Any:
    """The app's model loader, joining ``--model`` (only) to ``--dataset``; a dataset the
    user chooses in the app (``dataset_dir``) comes first."""
    def load(spec: str, progress: Any, dataset_dir: Any = None) -> Any:
        from flyviz.model.resolve import load_model

        if dataset_dir is None and dataset is not None and spec == model:
            dataset_dir = dataset
        return load_model(spec, progress, dataset_dir=dataset_dir)

    return load


def run(args: argparse.Namespace) -> int:
    """Start Qt and the main window; return the app's exit status."""
    if args.prompt is not None:
        if not args.prompt.strip():
            raise InputError("--prompt is empty: give some text for the model to continue")
        from flyviz.model.tokenizer import check_unicode

        check_unicode(args.prompt, "--prompt")  # as generate and trace refuse it
    from flyviz.model.resolve import check_spec

    if args.spec is not None and args.model not in ("demo", args.spec):
        raise InputError(f"two models given: SPEC {args.spec!r} and --model {args.model!r}; "
                         "give one")
    args.model = args.spec or args.model
    check_spec(args.model)  # a model that cannot exist is one line, before any window
    if args.recording:
        # A damaged recording is one line and exit status 2, before any window opens.
        from flyviz.record.recording import Recording

        Recording.load(args.recording)
    if args.atlas:
        # A missing or damaged atlas is one line and exit status 2, before any window opens;
        # whether it belongs to the model is checked once the model is loaded.
        from flyviz.app.atlas.atlas_panel import check_atlas

        check_atlas(args.atlas)
    if args.lesion_map:
        # Likewise for a lesion map: missing or damaged is one line and exit status 2.
        from flyviz.app.lesion.lesion_panel import check_lesion_map

        check_lesion_map(args.lesion_map)
    meshes = []
    if args.mesh:
        # A mesh that cannot be read is one line and exit status 2, before any window opens.
        from flyviz.analysis.outline import load_mesh

        meshes = [load_mesh(path) for path in args.mesh]
    if args.dataset is not None and not args.dataset.is_dir():
        raise InputError(f"--dataset {args.dataset} is not a folder")
    check_display()
    from PySide6.QtCore import QCoreApplication, Qt
    from PySide6.QtWidgets import QApplication

    from flyviz import APP_NAME, ORGANIZATION, ORGANIZATION_DOMAIN

    QCoreApplication.setOrganizationName(ORGANIZATION)
    QCoreApplication.setOrganizationDomain(ORGANIZATION_DOMAIN)
    QCoreApplication.setApplicationName(APP_NAME)
    QApplication.setAttribute(Qt.ApplicationAttribute.AA_ShareOpenGLContexts)
    use_gl(getattr(args, "gl", "auto"))
    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    app.setApplicationDisplayName("flyviz")
    app.setDesktopFileName("org.flyviz.flyviz")

    import vispy

    from flyviz.app.base.gc_policy import install_gc_policy

    install_gc_policy(app)      # collect on the GUI thread only (see flyviz.app.base.gc_policy)
    vispy.use(app="pyside6")
    from flyviz.app.window.main_window import MainWindow, install_excepthook
    from flyviz.app.base.theme import apply_dark_theme

    apply_dark_theme(app)
    window = MainWindow(model_spec=args.model, start_prompt=args.prompt,
                        model_loader=_loader_with_dataset(args.model, args.dataset))
    install_excepthook(window)
    if args.size is not None:
        window.resize(*args.size)
    for mesh in meshes:
        window.state.add_mesh_object(mesh)
    if args.outline:
        window.state.mesh.outline_shown = True
    opens: list[Callable[[], object]] = []
    if args.recording:
        opens.append(partial(window.open_recording, args.recording))
    if args.atlas:
        opens.append(partial(window.atlas.open, args.atlas))
    if args.lesion_map:
        opens.append(partial(window.lesions.open, args.lesion_map, importance=True))
    if opens:
        def open_when_ready(_name: str) -> None:
            from flyviz.model.errors import FlyvizError

            window.model_ready.disconnect(open_when_ready)
            for open_file in opens:
                try:
                    open_file()
                except FlyvizError as exc:
                    window.show_message(str(exc), error=True, dialog=True)

        window.model_ready.connect(open_when_ready)
    window.show()
    status = app.exec()
    window.shutdown()
    return int(status)
