"""The Hugging Face hub (docs/hub.md): search GGUF repositories, list a repository's models grouped by
quant with a fit verdict computed from their remote headers, and download them resumably into the model store.

No Qt here: the window runs these calls on a worker lane; the CLI calls them directly.
"""

from hisho.core.hub.catalog import QuantFile, RepoSummary, group_files, model_card, repo_files, search
from hisho.core.hub.download import Downloader, Job, Progress, pull
from hisho.core.hub.errors import GatedRepo, HubError, HubOffline, NotFound, offline
from hisho.core.hub.fetch import DiskFull, HashMismatch, Stopped
from hisho.core.hub.fit import Fit, fit_files

__all__ = ["DiskFull", "Downloader", "Fit", "GatedRepo", "HashMismatch", "HubError", "HubOffline", "Job",
           "NotFound", "Progress", "QuantFile", "RepoSummary", "Stopped", "fit_files", "group_files", "model_card",
           "offline", "pull", "repo_files", "search"]
