"""Pinned BPF maps from Python through the bpf(2) system call (ctypes): lookup, update,
delete and iteration.  Fast enough to mark every training iteration (no process spawn)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
from collections.abc import Iterator

_NR_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine(), 321)
_LOOKUP, _UPDATE, _DELETE, _NEXT_KEY, _OBJ_GET, _GET_INFO = 1, 2, 3, 4, 7, 15
_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd: int, attr: ctypes.Array) -> int:
    ret = _libc.syscall(_NR_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


class LayoutMismatch(ValueError):
    """The pinned map's key or value size is not the one the caller expects."""


def map_info(fd: int) -> dict[str, int | str]:
    """What the kernel says about the map behind ``fd`` (struct bpf_map_info)."""
    info = (ctypes.c_uint8 * 88)()
    attr = (ctypes.c_uint8 * 128)()
    ctypes.c_uint32.from_buffer(attr, 0).value = fd
    ctypes.c_uint32.from_buffer(attr, 4).value = ctypes.sizeof(info)
    ctypes.c_uint64.from_buffer(attr, 8).value = ctypes.addressof(info)
    _bpf(_GET_INFO, attr)
    u32 = [ctypes.c_uint32.from_buffer(info, 4 * i).value for i in range(6)]
    return {
        "type": u32[0],
        "id": u32[1],
        "key_size": u32[2],
        "value_size": u32[3],
        "max_entries": u32[4],
        "name": bytes(info[24:40]).rstrip(b"\0").decode(errors="replace"),
    }


class PinnedMap:
    """A BPF map pinned at ``path`` with fixed key and value sizes (bytes); opening it
    checks them against the sizes the kernel reports (:class:`LayoutMismatch`)."""

    def __init__(self, path: str, key_size: int, value_size: int) -> None:
        self.path, self.key_size, self.value_size = path, key_size, value_size
        name = ctypes.create_string_buffer(path.encode())
        attr = (ctypes.c_uint8 * 128)()
        ctypes.c_uint64.from_buffer(attr, 0).value = ctypes.addressof(name)
        self.fd = _bpf(_OBJ_GET, attr)
        info = map_info(self.fd)
        if (info["key_size"], info["value_size"]) != (key_size, value_size):
            self.close()
            raise LayoutMismatch(
                f"{path}: the kernel's map has {info['key_size']}-byte keys and "
                f"{info['value_size']}-byte values, expected {key_size} and {value_size}"
            )

    @classmethod
    def from_fd(cls, fd: int, key_size: int, value_size: int) -> PinnedMap:
        """The map behind an already open ``fd`` (e.g. inherited from a parent that could
        see the pin; a Mininet host has its own /sys), its sizes checked likewise."""
        self = cls.__new__(cls)
        self.path, self.key_size, self.value_size, self.fd = f"fd {fd}", key_size, value_size, fd
        info = map_info(fd)
        if (info["key_size"], info["value_size"]) != (key_size, value_size):
            raise LayoutMismatch(
                f"fd {fd}: the kernel's map has {info['key_size']}-byte keys and "
                f"{info['value_size']}-byte values, expected {key_size} and {value_size}"
            )
        return self

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PinnedMap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _attr(self, key: bytes, value: ctypes.Array | None, flags: int = 0) -> tuple:
        if len(key) != self.key_size:
            raise ValueError(f"key must be {self.key_size} bytes")
        k = ctypes.create_string_buffer(key, self.key_size)
        attr = (ctypes.c_uint8 * 128)()
        ctypes.c_uint32.from_buffer(attr, 0).value = self.fd
        ctypes.c_uint64.from_buffer(attr, 8).value = ctypes.addressof(k)
        if value is not None:
            ctypes.c_uint64.from_buffer(attr, 16).value = ctypes.addressof(value)
        ctypes.c_uint64.from_buffer(attr, 24).value = flags
        return attr, k

    def lookup(self, key: bytes) -> bytes | None:
        value = ctypes.create_string_buffer(self.value_size)
        attr, _k = self._attr(key, value)
        try:
            _bpf(_LOOKUP, attr)
        except FileNotFoundError:
            return None
        return value.raw

    def update(self, key: bytes, value: bytes) -> None:
        if len(value) != self.value_size:
            raise ValueError(f"value must be {self.value_size} bytes")
        buf = ctypes.create_string_buffer(value, self.value_size)
        attr, _k = self._attr(key, buf)
        _bpf(_UPDATE, attr)

    def delete(self, key: bytes) -> None:
        attr, _k = self._attr(key, None)
        with contextlib.suppress(FileNotFoundError):
            _bpf(_DELETE, attr)

    def iter_keys(self) -> Iterator[bytes]:
        nxt = ctypes.create_string_buffer(self.key_size)
        key: bytes | None = None
        while True:
            attr = (ctypes.c_uint8 * 128)()
            ctypes.c_uint32.from_buffer(attr, 0).value = self.fd
            if key is not None:
                kbuf = ctypes.create_string_buffer(key, self.key_size)
                ctypes.c_uint64.from_buffer(attr, 8).value = ctypes.addressof(kbuf)
            ctypes.c_uint64.from_buffer(attr, 16).value = ctypes.addressof(nxt)
            try:
                _bpf(_NEXT_KEY, attr)
            except FileNotFoundError:
                return
            key = nxt.raw
            yield key
