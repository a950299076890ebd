"""The shell around the screens: the application and its main window, the controller between the widgets and
the core services, the one bridge that moves core events onto the GUI thread, the status bar, toasts and the
theme."""
