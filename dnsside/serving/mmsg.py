"""Batched UDP system calls (``recvmmsg``/``sendmmsg``) through ctypes, on Linux.

Most of the CPU behind a UDP answer is the kernel's, and a good part of that is
the price of a system call on a virtual machine with today's mitigations. With
``recvmmsg`` one call returns every query waiting in the socket (up to
:data:`BATCH`), and one ``sendmmsg`` sends every reply; under load that cuts
the calls per query from two to a fraction. Nothing here needs a compiler:
ctypes is in the standard library and ``recvmmsg``/``sendmmsg`` are in every
Linux libc (glibc ≥ 2.12/2.14, musl).

The buffers are allocated once and reused for the life of the socket, laid out
so that Python touches them with a handful of cheap operations per query:

* one anonymous ``mmap`` holds two ``mmsghdr`` arrays (receive, send), their
  ``iovec`` arrays, the peers' socket addresses and one 64 KiB data slot per
  message (untouched pages are never made resident: a slot costs one or two
  pages in practice);
* receive header ``i`` points at ``sockaddr[i]`` and at an iovec covering slot
  ``i``: the kernel writes the query and its sender there;
* the reply is written over the query in the same slot and the *send* iovec's
  length set to its size; send header ``i`` points at the same ``sockaddr[i]``,
  so the sender address the kernel left there goes straight back to
  ``sendmmsg`` — no address is ever turned into a Python object, and nothing
  has to be restored between batches (only the send headers, after a batch in
  which some queries had no reply and the rest were moved up).

:func:`open_batch` checks the whole round trip once, on a private loopback
socket pair, before a server relies on it; anything unexpected (not Linux, a
libc without the calls, a seccomp filter answering ENOSYS, a layout that does
not round-trip) returns None and the caller keeps the plain
``recvfrom``/``sendto`` loop.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import socket
import sys
from typing import Any

log = logging.getLogger("dnsside.server")

BATCH = 64  # messages per call: NSD reads up to 100; batches here rarely pass 30
SLOT = 65536  # one datagram (UDP payloads stop at 65,507 bytes over IPv4, 65,527 over IPv6)
_NAME = 128  # sizeof(struct sockaddr_storage)
MSG_WAITFORONE = 0x10000  # block for the first message only, then take what is queued
MSG_DONTWAIT = 0x40


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    # glibc's layout; musl's int-plus-padding fields have the same size and, on the
    # little-endian machines Linux runs on almost everywhere, the same bytes. The
    # self-test in open_batch() catches any platform where that does not hold.
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.c_void_p),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _MsgHdr), ("msg_len", ctypes.c_uint)]


_HDR = ctypes.sizeof(_MMsgHdr)
_IOV = ctypes.sizeof(_IoVec)


def _libc_calls() -> tuple[Any, Any, Any] | None:
    """``recvmmsg``, ``sendmmsg`` and ``__errno_location`` from the C library, or None.

    Deliberately without ``argtypes`` and ``use_errno``: converting through
    ``argtypes`` and saving errno cost, per call, about what a whole system call
    saves (bench/discussion.md). Arguments are passed as Python ints (C int) and
    ``c_void_p`` objects (pointers); errno, needed only after a failure, is read
    from the thread's own ``errno`` (see :func:`last_errno`).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        recvmmsg, sendmmsg, errno_location = (
            libc.recvmmsg, libc.sendmmsg, libc.__errno_location)
    except (OSError, AttributeError):
        return None
    recvmmsg.restype = sendmmsg.restype = ctypes.c_int
    errno_location.restype = ctypes.c_void_p
    errno_location.argtypes = []
    return recvmmsg, sendmmsg, errno_location


class BatchIO:
    """Preallocated ``recvmmsg``/``sendmmsg`` buffers for one socket.

    Two header arrays share the address buffers and data slots: the receive
    headers (``iov_len`` always a whole slot, never written by Python) and the
    send headers (``iov_len`` set to each reply's size, ``msg_namelen`` fixed to
    the socket family's address size, which is what the kernel writes for every
    datagram of that socket). So nothing needs restoring between batches, except
    the send headers after a batch that had to move some.

    The server loop uses the attributes directly (bound locals are what make it
    fast); the methods are for the rare paths: errors, logging, the self-test.
    """

    def __init__(self, sock: socket.socket, calls: tuple[Any, Any, Any],
                 batch: int = BATCH) -> None:
        self.fd = sock.fileno()
        self.recvmmsg, self.sendmmsg, self._errno_location = calls
        self.batch = batch
        recv_at, send_at = 0, batch * _HDR
        recv_iov_at, send_iov_at = 2 * batch * _HDR, 2 * batch * _HDR + batch * _IOV
        names_at = send_iov_at + batch * _IOV
        data_at = -(-(names_at + batch * _NAME) // mmap.PAGESIZE) * mmap.PAGESIZE
        self.mem = mmap.mmap(-1, data_at + batch * SLOT)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.mem))
        self._base = base
        namelen = _NAME
        if sock.family == socket.AF_INET:
            namelen = 16  # sizeof(struct sockaddr_in)
        elif sock.family == socket.AF_INET6:
            namelen = 28  # sizeof(struct sockaddr_in6)
        for headers_at, iovecs_at, length, name_length in (
                (recv_at, recv_iov_at, SLOT, _NAME), (send_at, send_iov_at, 0, namelen)):
            headers = (_MMsgHdr * batch).from_buffer(self.mem, headers_at)
            iovecs = (_IoVec * batch).from_buffer(self.mem, iovecs_at)
            for i in range(batch):
                iovecs[i].iov_base = base + data_at + i * SLOT
                iovecs[i].iov_len = length
                h = headers[i].msg_hdr
                h.msg_name = base + names_at + i * _NAME
                h.msg_namelen = name_length
                h.msg_iov = base + iovecs_at + i * _IOV
                h.msg_iovlen = 1
            del headers, iovecs  # no ctypes object may keep exporting the buffer
        #: the pointer arguments of recvmmsg and sendmmsg
        self.recv_headers = ctypes.c_void_p(base + recv_at)
        self.send_headers = ctypes.c_void_p(base + send_at)
        self.send_headers_addr = base + send_at
        view = memoryview(self.mem)
        #: ``msg_len`` of received message i is ``lengths[i * len_stride + len_at]``
        self.lengths = view[recv_at:send_at].cast("I")
        self.len_stride, self.len_at = _HDR // 4, _MMsgHdr.msg_len.offset // 4
        #: ``iov_len`` of reply i is ``reply_lengths[2 * i + 1]``
        self.reply_lengths = view[send_iov_at:names_at].cast("P")  # size_t: pointer-sized
        #: the send headers, restored from ``pristine_send`` after a batch that moved some
        self.send_bytes = view[send_at:recv_iov_at]
        self.pristine_send = bytes(self.send_bytes)
        self.data_at = data_at
        self.names_at = names_at  # sender i's address is mem[names_at + i * 128:]
        #: message i's data starts at ``mem[slot_starts[i]]``
        self.slot_starts = [data_at + i * SLOT for i in range(batch)]
        #: per message i: (data start, index of its msg_len, index of its reply iov_len)
        self.slots = [(self.slot_starts[i], i * self.len_stride + self.len_at, 2 * i + 1)
                      for i in range(batch)]

    def last_errno(self) -> int:
        """errno of this thread's last failed call (read right after the failure).

        ``__errno_location`` gives the calling thread's own errno, and nothing between
        a failed ctypes call and this one (the GIL handover, the result conversion)
        sets errno without failing itself.
        """
        return ctypes.c_int.from_address(self._errno_location()).value

    def receive(self, flags: int = MSG_WAITFORONE) -> int:
        """Messages received (blocking for the first with MSG_WAITFORONE); -errno on error."""
        got: int = self.recvmmsg(self.fd, self.recv_headers, self.batch, flags, None)
        return got if got >= 0 else -self.last_errno()

    def query(self, i: int) -> bytes:
        start = self.data_at + i * SLOT
        return self.mem[start : start + self.lengths[i * self.len_stride + self.len_at]]

    def put_reply(self, i: int, reply: bytes) -> None:
        """Reply ``i`` (over query ``i``, in its slot), to go back to query ``i``'s sender."""
        start = self.data_at + i * SLOT
        self.mem[start : start + len(reply)] = reply
        self.reply_lengths[2 * i + 1] = len(reply)

    def send(self, count: int, done: int = 0) -> None:
        """Send replies ``done`` to ``count``; one that fails is logged and skipped."""
        sendmmsg, fd = self.sendmmsg, self.fd
        while done < count:
            sent: int = sendmmsg(fd, ctypes.c_void_p(self.send_headers_addr + done * _HDR),
                                 count - done, 0)
            if sent > 0:
                done += sent
                continue
            err = self.last_errno() if sent < 0 else errno.EIO
            if err == errno.EINTR:
                continue
            # The reply could not be sent (unreachable, EPERM, ...): skip that one.
            log.debug("udp send to %s failed: %s", self.peer(done)[0], os.strerror(err))
            done += 1

    def move(self, src: int, dst: int) -> None:
        """Send header ``src`` to position ``dst`` (to send only the queries that have replies)."""
        sb = self.send_bytes
        sb[dst * _HDR : (dst + 1) * _HDR] = sb[src * _HDR : (src + 1) * _HDR]

    def reset(self) -> None:
        """Undo :meth:`move`."""
        self.send_bytes[:] = self.pristine_send

    def release(self) -> None:
        """Give the buffers back (the views first: an mmap with exports cannot close)."""
        for view in (self.lengths, self.reply_lengths, self.send_bytes):
            view.release()
        self.mem.close()

    def peer(self, i: int) -> tuple[str | int, ...]:
        """The sender of query ``i`` (after :meth:`move`, of the reply at ``i``), for logs."""
        name_addr = ctypes.c_void_p.from_buffer(self.mem, self.send_headers_addr - self._base
                                                + i * _HDR).value or 0
        offset = name_addr - self._base
        raw = bytes(self.mem[offset : offset + _NAME])
        family = int.from_bytes(raw[:2], sys.byteorder)
        port = int.from_bytes(raw[2:4], "big")
        if family == socket.AF_INET:
            return socket.inet_ntop(socket.AF_INET, raw[4:8]), port
        if family == socket.AF_INET6:
            return socket.inet_ntop(socket.AF_INET6, raw[8:24]), port
        return ("?",)


def open_batch(sock: socket.socket, batch: int = BATCH) -> BatchIO | None:
    """Batched I/O for ``sock`` if this platform provides it and it round-trips; else None."""
    calls = _libc_calls()
    if calls is None:
        return None
    try:
        if not _self_test(calls, sock.family):
            return None
    except OSError as exc:
        log.warning("recvmmsg/sendmmsg self-test failed (%s): plain recvfrom/sendto", exc)
        return None
    return BatchIO(sock, calls, batch)


def _self_test(calls: tuple[Any, Any, Any], family: int) -> bool:
    """Receive two datagrams in one call and answer both, on a private loopback pair."""
    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    server = socket.socket(family, socket.SOCK_DGRAM)
    client = socket.socket(family, socket.SOCK_DGRAM)
    with server, client:
        server.bind((host, 0))
        client.bind((host, 0))
        client.settimeout(1.0)
        io = BatchIO(server, calls, batch=4)
        try:
            client.sendto(b"dnsside-1", server.getsockname())
            client.sendto(b"dnsside-22", server.getsockname())
            got = 0
            for _ in range(100):  # loopback delivery is synchronous; this is belt and braces
                got = io.receive(MSG_DONTWAIT)
                if got != -errno.EAGAIN:
                    break
            if got < 0:
                log.warning("recvmmsg unusable (%s): plain recvfrom/sendto", os.strerror(-got))
                return False
            if got != 2 or io.query(0) != b"dnsside-1" or io.query(1) != b"dnsside-22":
                log.warning("recvmmsg layout check failed: plain recvfrom/sendto")
                return False
            io.put_reply(0, b"reply-0")
            io.put_reply(1, b"reply-11")
            sent = io.sendmmsg(io.fd, io.send_headers, 2, 0)
            if sent != 2:
                log.warning("sendmmsg unusable (%s): plain recvfrom/sendto",
                            os.strerror(io.last_errno()))
                return False
            if client.recv(64) != b"reply-0" or client.recv(64) != b"reply-11":
                log.warning("sendmmsg layout check failed: plain recvfrom/sendto")
                return False
            return True
        finally:
            io.release()
