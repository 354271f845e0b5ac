"""The window and its bindings: the main window, the host protocol features see, docks, actions, files and dialogs."""
