"""Key files: the node's (and a client's) CURVE key pair and public keys.

Key files are ZeroMQ certificates (``zmq.auth.create_certificates``): ``NAME.key`` holds
the public key, ``NAME.key_secret`` both keys. A key may also be given as its 40-character
Z85 text.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import zmq
import zmq.auth
from zmq.utils import z85

from ..errors import ConfigError

__all__ = ["NODE_KEY_NAME", "generate_keys", "is_z85", "load_key_pair", "read_public_key"]

#: the node's key pair in its key directory: ``node.key`` and ``node.key_secret``
NODE_KEY_NAME = "node"


def generate_keys(directory: Path, name: str = NODE_KEY_NAME) -> tuple[Path, bool]:
    """Create ``NAME.key``/``NAME.key_secret`` in ``directory`` unless they exist.

    Returns (secret file, created). The secret file is readable by its owner only."""
    secret = directory / f"{name}.key_secret"
    public = directory / f"{name}.key"
    if secret.exists():
        load_key_pair(secret)  # an unreadable existing pair is an error, never overwritten
        return secret, False
    if public.exists():
        raise ConfigError(f"{public} exists without {secret.name}: refusing to overwrite it")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # written in a directory only we may enter, and moved into place once private:
        # pyzmq writes the secret under the umask (often 0644) and chmod came after, so
        # any local user could have opened it in between
        private = Path(tempfile.mkdtemp(prefix=".keygen-", dir=directory))
        try:
            pub_file, sec_file = zmq.auth.create_certificates(private, name)
            Path(sec_file).chmod(0o600)
            os.replace(sec_file, secret)
            os.replace(pub_file, public)
        finally:
            shutil.rmtree(private, ignore_errors=True)
    except OSError as exc:
        raise ConfigError(f"cannot write keys in {directory}: {exc}") from exc
    return secret, True


def load_key_pair(path: str | Path) -> tuple[bytes, bytes]:
    """(public, secret) Z85 keys from a secret certificate, or from a key directory (its
    ``node.key_secret``), or from a 40-character Z85 secret key given as text."""
    text = str(path)
    if len(text) == 40 and not Path(text).exists() and is_z85(text):
        secret = text.encode()
        return zmq.curve_public(secret), secret
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / f"{NODE_KEY_NAME}.key_secret"
    if not p.exists():
        raise ConfigError(
            f"security is on but there is no key pair at {p}: create it with `zbroker keygen "
            f"--data-dir {p.parent}` (or `--out DIR --name NAME` for a client)"
        )
    try:
        pub, sec = zmq.auth.load_certificate(p)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot load a secret key from {p}: {exc} (create one with `zbroker keygen`)"
        ) from exc
    if not pub or not sec:
        raise ConfigError(f"{p} holds no secret key (it is a public certificate)")
    return pub, sec


def read_public_key(value: str | Path) -> bytes:
    """A public key: 40-character Z85 text, or the path of a certificate holding one."""
    text = str(value).strip()
    if len(text) == 40 and is_z85(text) and not Path(text).exists():
        return text.encode()
    try:
        public, _ = zmq.auth.load_certificate(Path(text).expanduser())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{text!r} is neither a 40-character Z85 public key nor a readable key file: {exc}"
        ) from exc
    if not public:
        raise ConfigError(f"{text}: no public key in it")
    return public


def is_z85(text: str) -> bool:
    """Is ``text`` a Z85-encoded 32-byte key?"""
    try:
        return len(z85.decode(text.encode())) == 32
    except (ValueError, KeyError, UnicodeError):
        return False
