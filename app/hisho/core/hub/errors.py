"""Hub failures as one line for the person, and where the hub is (``HF_ENDPOINT``, ``HF_HUB_OFFLINE``).

huggingface_hub reads ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` once, when it is imported; we read them at every
call so a test (or a user who changes them in Settings) is honoured without restarting.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from hisho.core.errors import UserError

DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = {"1", "on", "yes", "true"}


class HubError(UserError):
    """The hub could not answer as asked. ``retry`` says whether trying again may help."""

    retry = True


class HubOffline(HubError):
    """No network, or offline mode: local models keep working."""


class GatedRepo(HubError):
    """The repository needs a Hugging Face token of an account that accepted its terms. ``token_refused``: a
    token was sent and the hub said no (the window then does not ask again by itself)."""

    retry = False

    def __init__(self, message: str, *, token_refused: bool = False) -> None:
        super().__init__(message)
        self.token_refused = token_refused


def _token_sent() -> bool:
    """Whether requests carry a token: ours (``hisho.core.hub.token``) or huggingface_hub's own."""
    from hisho.core.hub.token import get_token

    if get_token():
        return True
    try:
        from huggingface_hub import get_token as hf_token

        return bool(hf_token())
    except Exception:  # its token file unreadable: then none was sent
        return False


def gated(what: str) -> GatedRepo:
    """The one line for a gated repository: what to do differs with and without a token."""
    if _token_sent():
        return GatedRepo(f"{what}: the repository is gated and the hub refused the Hugging Face token; accept its "
                         "terms on the hub with that account, or store another token (Token…)", token_refused=True)
    return GatedRepo(f"{what}: the repository is gated; add a Hugging Face token of an account that accepted its "
                     "terms (Models → Hub → Token…, or `hisho models token`)")


class NotFound(HubError):
    retry = False


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline() -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE:
        return True
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - a declared dependency
        return True
    return bool(constants.is_offline_mode())


OFFLINE_MESSAGE = "Offline (HF_HUB_OFFLINE is set): the hub is not contacted; local models keep working."


def check_online() -> None:
    if offline():
        raise HubOffline(OFFLINE_MESSAGE)


def translate(exc: BaseException, what: str) -> HubError:
    """Any exception from huggingface_hub or httpx as a HubError with one line that says what to do."""
    import huggingface_hub.errors as e

    name = type(exc).__name__
    if isinstance(exc, HubError):
        return exc
    if isinstance(exc, e.OfflineModeIsEnabled):
        return HubOffline(OFFLINE_MESSAGE)
    if isinstance(exc, e.GatedRepoError):
        return gated(what)
    if isinstance(exc, e.RepositoryNotFoundError):
        return NotFound(f"{what}: no such repository on the hub (or it is private: add a token)")
    if isinstance(exc, e.RevisionNotFoundError | e.EntryNotFoundError | e.RemoteEntryNotFoundError):
        return NotFound(f"{what}: no such file or revision on the hub")
    if isinstance(exc, e.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        if status == 401:
            return GatedRepo(f"{what}: the hub refused the request (401): the token is missing or not valid",
                             token_refused=_token_sent())
        return HubError(f"{what}: the hub answered with an error ({status}); try again later")
    if name in ("ReadError", "WriteError") or isinstance(exc, ConnectionResetError):
        return HubOffline(f"{what}: the connection to the hub broke off ({exc}); try again to resume")
    if "Timeout" in name:
        return HubError(f"{what}: the hub did not answer in time; check the network and try again")
    if "Connect" in name or "Network" in name or "RemoteProtocol" in name or isinstance(exc, ConnectionError):
        return HubOffline(f"{what}: cannot reach the hub at {endpoint()} (no network?); local models keep working")
    return HubError(f"{what}: {name}: {exc}")


@contextmanager
def hub_call(what: str) -> Iterator[None]:
    """Run a hub request; failures come out as HubError (a UserError with one line)."""
    check_online()
    try:
        yield
    except HubError:
        raise
    except Exception as exc:  # huggingface_hub and httpx raise many types; each becomes one line
        raise translate(exc, what) from None
