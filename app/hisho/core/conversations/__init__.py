"""Conversations: the store (``store``; records and migrations in ``schema``), export and import
(``exchange``) and the chat service that turns "the user pressed Enter" into a saved reply (``chat``). No Qt.
Rules of use: text in SQLite is the source of truth; the chat service records the user's side at once and
streams the reply off the GUI thread."""
