"""The PySide6 window. Only this package imports Qt."""
