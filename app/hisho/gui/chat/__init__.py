"""The chat screen: the conversation list and sidebar, the message view and its widgets, the composer, and
what a send, an edit or an attachment does on screen. Widgets start no threads: work goes through the
controller onto the executor's lanes."""
