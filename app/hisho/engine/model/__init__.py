"""The loaded model: its context (Runtime), its chat template, its reasoning format."""
