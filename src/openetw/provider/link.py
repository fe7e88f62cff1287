"""The process's one connection to the trace service, shared by every provider it registers.

A daemon thread owns the connection. While no service listens it looks for the socket every
``RETRY_INTERVAL`` seconds (providers stay disabled meanwhile, at the cost of one flag test per
write); once connected it registers every provider, then reads the service's messages:

* ``pool``: a buffer pool (memfd) for one session, mapped here and written by every provider
  of the process that the session enables;
* ``enable``: a registration's new enable state (the ``enabled`` flag, the enable callback);
* ``close_pool``: stop writing into a pool, mark its partly filled buffer FULL, say so;
* ``flush``: mark a pool's partly filled buffer FULL now (a controller's FLUSH), say so;
* ``capture_state``: call the provider's enable callback with ``capture_state`` true.

The same thread marks partly filled buffers FULL every flush interval, so events reach the
file while the process is idle. When the connection ends (the service stopped or died) every
provider is disabled and the search for the socket begins again.

After ``fork`` the child drops the connection and the pools it inherited (the pool writers
refuse to write in a child) and registers its providers anew, as a process of its own.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from openetw.errors import OpenEtwError
from openetw.ipc.places import client_socket_paths

# The wire format and the enable states load with the service's first answer: a process that
# finds no service loads neither (nor dataclasses, which they are made of).
if TYPE_CHECKING:
    from openetw.ipc.pool import BufferPool, PoolWriter
    from openetw.ipc.protocol import Channel, Message
    from openetw.session.enable import EnableState

__all__ = ["REGISTER_WAIT", "RETRY_INTERVAL", "ServiceLink", "link"]

RETRY_INTERVAL = 0.5
REGISTER_WAIT = 2.0  # how long register() waits for a service whose socket exists
RETIRED_POOL_GRACE = 2.0  # a closed pool stays mapped this long for writes already under way
EVENT_LOG_PREFIX = "EventLog-"  # the Event Log's channel sessions: their pools outlive a dead service


class Registrant(Protocol):
    """What the link needs of a provider (``openetw.provider.runtime`` implements it)."""

    provider_text: str
    name: str | None
    registration_id: int | None
    registered: threading.Event

    def _apply_state(self, state: EnableState, writers: dict[int, PoolWriter], *, notify: bool = True) -> None: ...
    def _refresh_writers(self, writers: dict[int, PoolWriter]) -> None: ...
    def _capture_state(self, session_id: int) -> None: ...


class _PoolSlot:
    """A pool of one session, mapped here, and its writer."""

    __slots__ = ("pool_id", "session_id", "pool", "writer", "flush_interval", "last_flush", "session_name")

    def __init__(self, pool_id: int, session_id: int, pool: BufferPool, writer: PoolWriter, flush_interval: float,
                 last_flush: float | None = None, session_name: str = "") -> None:  # fmt: skip
        self.pool_id = pool_id
        self.session_id = session_id
        self.pool = pool
        self.writer = writer
        self.flush_interval = flush_interval  # seconds; 0: partly filled buffers wait for a FLUSH, a stop or our exit
        self.last_flush = time.monotonic() if last_flush is None else last_flush
        self.session_name = session_name


class _LinkState:
    """Everything that belongs to one connection (dropped whole when it ends or at a fork)."""

    def __init__(self, channel: Channel | None = None) -> None:
        self.channel = channel
        self.pools: dict[int, _PoolSlot] = {}
        self.session_writers: dict[int, PoolWriter] = {}
        self.sent: set[int] = set()  # id(provider) of those whose register went out
        self.requests: dict[int, Registrant] = {}  # register request id -> provider
        self.handing: dict[int, _PoolSlot] = {}  # log_orphans request id -> the pool, until answered
        self.by_registration: dict[int, Registrant] = {}


class ServiceLink:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.RLock()
        self._providers: dict[int, Registrant] = {}
        self._state = _LinkState()
        self._retired: list[tuple[float, BufferPool]] = []
        # Pools of Event Log channel sessions whose service went away: what they still hold goes
        # to the next service once this process's providers are registered there again.
        self._orphans: list[_PoolSlot] = []
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    # -- providers -----------------------------------------------------------------------------
    def add(self, provider: Registrant, *, wait: float = REGISTER_WAIT) -> None:
        """Register ``provider`` now if a service runs (waiting up to ``wait`` for its enable
        state), or as soon as one appears."""
        with self._lock:
            self._providers[id(provider)] = provider
            self._ensure_thread()
            channel = self._state.channel
            if channel is not None:
                self._send_register(provider)
        on_link_thread = threading.current_thread() is self._thread
        if channel is None and wait > 0 and not on_link_thread:
            channel = self._connect()  # at once: no service (or a stale socket) costs no waiting
        self._wake.set()
        if channel is not None and wait > 0 and not on_link_thread:
            provider.registered.wait(wait)

    def remove(self, provider: Registrant) -> None:
        with self._lock:
            if self._providers.pop(id(provider), None) is None:
                return
            state = self._state
            state.sent.discard(id(provider))
            registration_id = provider.registration_id
            provider.registration_id = None
            provider.registered.clear()
            if registration_id is not None:
                state.by_registration.pop(registration_id, None)
                if state.channel is not None:
                    try:
                        state.channel.send({"op": "unregister", "id": state.channel.new_id(), "registration": registration_id})
                    except OSError:
                        pass
        from openetw.session.enable import DISABLED

        provider._apply_state(DISABLED, {})
        self._wake.set()

    def _send_register(self, provider: Registrant) -> None:
        state = self._state
        if state.channel is None or id(provider) in state.sent:
            return
        request_id = state.channel.new_id()
        state.requests[request_id] = provider
        state.sent.add(id(provider))
        body: dict[str, Any] = {"op": "register", "id": request_id, "provider": provider.provider_text}
        if provider.name:
            body["name"] = provider.name
        if getattr(provider, "classic", False):  # RegisterTraceGuids: one session at a time
            body["classic"] = True
        try:
            state.channel.send(body)
        except OSError:
            pass  # the thread sees the connection end and starts over

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="openetw-provider-link", daemon=True)
            self._thread.start()

    # -- the thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._providers:
                    self._thread = None
                    return
            channel = self._connect()
            if channel is None:
                self._wake.wait(RETRY_INTERVAL)
                self._wake.clear()
                continue
            try:
                self._serve(channel)
            finally:
                self._disconnected(channel)

    def _connect(self) -> Channel | None:
        """The current connection, or a new one (every provider registered on it), or None."""
        with self._lock:
            if self._state.channel is not None:
                return self._state.channel
            for path in client_socket_paths():
                if not os.path.exists(path):
                    continue
                # Sockets and JSON load once a service's socket is there: a process no one traces never needs them.
                from openetw.ipc.protocol import Channel

                try:
                    channel = Channel.connect(path, timeout=REGISTER_WAIT)
                except OSError:
                    continue
                self._state = _LinkState(channel=channel)
                for provider in list(self._providers.values()):
                    self._send_register(provider)
                return channel
        return None

    def _serve(self, channel: Channel) -> None:
        while True:
            with self._lock:
                if not self._providers:
                    return
            messages = channel.poll(min(RETRY_INTERVAL, self._flush_period()))
            if messages is None:
                return
            for message in messages:
                try:
                    self._handle(message)
                except OpenEtwError as exc:
                    _warn(f"ignored a message from the trace service: {exc}")
                finally:
                    message.close_fds()
            self._housekeeping()

    def _flush_period(self) -> float:
        intervals = [slot.flush_interval for slot in self._state.pools.values() if slot.flush_interval > 0]
        return min(intervals, default=RETRY_INTERVAL)

    def _housekeeping(self) -> None:
        """The flush timer: a pool's partly filled buffer goes FULL every flush interval."""
        if self._orphans and not self._state.requests:  # every provider registered: the service screens by them
            with self._lock:
                self._send_orphans()
        now = time.monotonic()
        for slot in list(self._state.pools.values()):
            if slot.flush_interval > 0 and now - slot.last_flush >= slot.flush_interval:
                slot.last_flush = now
                slot.writer.flush()
        while self._retired and now - self._retired[0][0] >= RETIRED_POOL_GRACE:
            _, pool = self._retired.pop(0)
            if not _close_pool(pool):  # a write still holds it: try again later
                self._retired.append((now, pool))
                break

    def _disconnected(self, channel: Channel) -> None:
        """The service went away: every provider is disabled until it (or another) comes back."""
        channel.close()
        with self._lock:
            state, self._state = self._state, _LinkState()
            self._retire(state)
            providers = list(self._providers.values())
            for provider in providers:
                provider.registration_id = None
                provider.registered.clear()
        from openetw.session.enable import DISABLED

        for provider in providers:
            provider._apply_state(DISABLED, {})

    def _retire(self, state: _LinkState) -> None:
        now = time.monotonic()
        self._orphans.extend(state.handing.values())  # never answered: the next service gets them
        for slot in state.pools.values():
            if slot.session_name.startswith(EVENT_LOG_PREFIX):
                self._orphans.append(slot)
            else:
                self._retired.append((now, slot.pool))

    def _send_orphans(self) -> None:
        """Hand the pools of a dead service's channel sessions to this one (``log_orphans``):
        it stores the events they still hold in their logs, or counts them lost. A pool is
        kept until the service answers: one that died meanwhile leaves it to the next."""
        channel = self._state.channel
        if channel is None or not self._orphans:
            return
        orphans, self._orphans = self._orphans, []
        for slot in orphans:
            request_id = channel.new_id()
            try:
                channel.send({"op": "log_orphans", "id": request_id, "session": slot.session_name}, fds=(slot.pool.fileno(),))
            except OSError:
                self._orphans.append(slot)  # the next service gets it
                continue
            self._state.handing[request_id] = slot

    # -- messages ------------------------------------------------------------------------------
    def _handle(self, message: Message) -> None:
        body = message.body
        event = body.get("event")
        if event is None:
            self._on_reply(body)
        elif event == "pool":
            self._on_pool(message)
        elif event == "enable":
            self._on_enable(body)
        elif event == "close_pool":
            self._on_close_pool(body)
        elif event == "flush":
            self._on_flush(body)
        elif event == "capture_state":
            provider = self._state.by_registration.get(body.get("registration"))  # type: ignore[arg-type]
            if provider is not None:
                provider._capture_state(int(body.get("session_id", 0)))

    def _on_reply(self, body: dict[str, Any]) -> None:
        with self._lock:
            handed = self._state.handing.pop(body.get("id"), None)  # type: ignore[arg-type]
            if handed is not None:  # stored (or refused for good): the pool is done with
                if not body.get("ok"):
                    _warn(f"the trace service did not take the events left in a pool of {handed.session_name}: {body.get('error')}")
                self._retired.append((time.monotonic(), handed.pool))
                return
            provider = self._state.requests.pop(body.get("id"), None)  # type: ignore[arg-type]
            if provider is None:
                return
            if not body.get("ok"):
                _warn(f"registration of {provider.provider_text} refused: {body.get('error')}")
                provider.registered.set()  # do not keep register() waiting
                return
            if id(provider) not in self._providers:  # unregistered while the answer was on its way
                channel = self._state.channel
                if channel is not None:
                    channel.send({"op": "unregister", "id": channel.new_id(), "registration": body.get("registration")})
                return
            registration_id = int(body["registration"])
            provider.registration_id = registration_id
            self._state.by_registration[registration_id] = provider
            writers = dict(self._state.session_writers)
        from openetw.ipc.wire import enable_state_from_json

        provider._apply_state(enable_state_from_json(body.get("state")), writers)
        provider.registered.set()

    def _on_pool(self, message: Message) -> None:
        body = message.body
        fd = message.take_fd()
        from openetw.ipc.pool import BufferPool  # loaded with the first pool a session hands us

        pool = BufferPool.attach(fd)
        writer = pool.writer(doorbell=self._state.channel)
        slot = _PoolSlot(int(body["pool_id"]), int(body["session_id"]), pool, writer, int(body.get("flush_interval_ms", 0)) / 1000,
                         session_name=str(body.get("session_name", "")))  # fmt: skip
        with self._lock:
            self._state.pools[slot.pool_id] = slot
            self._state.session_writers[slot.session_id] = writer

    def _on_enable(self, body: dict[str, Any]) -> None:
        with self._lock:
            provider = self._state.by_registration.get(body.get("registration"))  # type: ignore[arg-type]
            writers = dict(self._state.session_writers)
        if provider is not None:  # not yet answered: the register reply carries the state
            from openetw.ipc.wire import enable_state_from_json

            provider._apply_state(enable_state_from_json(body.get("state")), writers)

    def _on_close_pool(self, body: dict[str, Any]) -> None:
        pool_id = int(body.get("pool_id", -1))
        with self._lock:
            state = self._state
            slot = state.pools.pop(pool_id, None)
            if slot is not None and state.session_writers.get(slot.session_id) is slot.writer:
                del state.session_writers[slot.session_id]
            writers = dict(state.session_writers)
            providers = list(state.by_registration.values())
        if slot is not None:
            for provider in providers:
                provider._refresh_writers(writers)
            # A write that picked this writer just before may still be under way: flush, let it
            # finish, flush again. The service takes FILLING buffers too once we answer.
            slot.writer.flush()
            time.sleep(0.002)
            slot.writer.flush()
            self._retired.append((time.monotonic(), slot.pool))
        channel = state.channel
        if channel is not None:
            channel.send({"op": "pool_closed", "pool_id": pool_id})

    def _on_flush(self, body: dict[str, Any]) -> None:
        slot = self._state.pools.get(int(body.get("pool_id", -1)))
        if slot is not None:
            slot.writer.flush()
        channel = self._state.channel
        if channel is not None:
            channel.send({"op": "flushed", "token": body.get("token")})

    # -- fork ----------------------------------------------------------------------------------
    def _after_fork_in_child(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.RLock()
        self._wake = threading.Event()
        state, self._state = self._state, _LinkState()
        if state.channel is not None:
            try:
                os.close(state.channel.sock.detach())
            except OSError:
                pass
        for slot in state.pools.values():
            _close_pool(slot.pool)
        for _, pool in self._retired:
            _close_pool(pool)
        for slot in [*self._orphans, *state.handing.values()]:
            _close_pool(slot.pool)
        self._retired = []
        self._orphans = []
        self._thread = None
        from openetw.session.enable import DISABLED

        for provider in self._providers.values():
            provider.registration_id = None
            provider.registered = threading.Event()
            provider._apply_state(DISABLED, {}, notify=False)
        if self._providers:
            self._ensure_thread()


def _close_pool(pool: BufferPool) -> bool:
    try:
        pool.close()
    except (BufferError, ValueError, OSError):
        return False
    return True


def _warn(message: str) -> None:
    print(f"openetw: {message}", file=sys.stderr)


_LINK: ServiceLink | None = None
_LINK_LOCK = threading.Lock()
_LINKS: weakref.WeakSet[ServiceLink] = weakref.WeakSet()


def link() -> ServiceLink:
    """The process's link (made on first use)."""
    global _LINK
    with _LINK_LOCK:
        if _LINK is None:
            _LINK = ServiceLink()
            _LINKS.add(_LINK)
        return _LINK


def _after_fork_in_child() -> None:
    global _LINK_LOCK
    _LINK_LOCK = threading.Lock()
    for each in list(_LINKS):
        each._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
