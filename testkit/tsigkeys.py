"""TSIG key files written in Python, as BIND's ``tsig-keygen -a ALGORITHM NAME`` writes
them, so that the quick tier needs no BIND on the machine.

tests/interop/test_tsig_tools.py checks that tsig-keygen's own files parse the same way.
"""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

SECRET_BYTES = {"hmac-sha256": 32, "hmac-sha384": 48, "hmac-sha512": 64}  # tsig-keygen's


def key_file_text(name: str, algorithm: str = "hmac-sha256") -> str:
    """A new random key, in tsig-keygen's layout (tabs, a closing ``};``)."""
    secret = base64.b64encode(secrets.token_bytes(SECRET_BYTES[algorithm])).decode()
    return f'key "{name}" {{\n\talgorithm {algorithm};\n\tsecret "{secret}";\n}};\n'


def write_key_file(path: Path, name: str, algorithm: str = "hmac-sha256") -> Path:
    path.write_text(key_file_text(name, algorithm))
    return path
