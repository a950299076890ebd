"""Tools in the chat: MCP servers the model can call (``manager``, ``config``) and the tool loop a reply runs
(``loop``), the person approving each call (``approvals``). No Qt. docs/tools.md."""
