"""The upload rule: what a campaign's `upload` may send to a stranger's host.

A campaign file may come from someone else, so each path must resolve inside the upload root (the
campaign file's folder, or `--upload-root`); nothing hidden goes, and no private key (rentwatch's
own, one named as OpenSSH names them, or one whose first bytes say so)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from ...core.errors import ConfigError
from ...core.text import clean

HEAD_BYTES = 4096
# OpenSSH's default key names (ssh-keygen(1), FILES), with their certificates and .pub halves
_KEY_NAME = re.compile(r"^id_(rsa|dsa|ecdsa|ecdsa_sk|ed25519|ed25519_sk|xmss)(-cert)?(\.pub)?$")
# PEM and OpenSSH armour of a private key: "-----BEGIN [RSA |EC |OPENSSH |ENCRYPTED ]PRIVATE
# KEY-----", and PGP's "-----BEGIN PGP PRIVATE KEY BLOCK-----"
_KEY_ARMOUR = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY")


def looks_like_key(head: bytes, name: str) -> bool:
    """Whether a file whose first bytes are `head` and whose name is `name` is a key."""
    return bool(_KEY_NAME.match(name) or _KEY_ARMOUR.search(head))


def _head(path: Path) -> bytes:
    with open(path, "rb", buffering=0) as f:
        return f.read(HEAD_BYTES)


def _is_own_key(path: Path, own_keys: Iterable[Path]) -> bool:
    for key in own_keys:
        for k in (key, key.with_name(key.name + ".pub")):
            try:
                if os.path.samefile(path, k):
                    return True
            except OSError:
                continue
    return False


def folder_files(top: Path) -> Iterator[Path]:
    """The regular files under `top` an upload sends: no symlink followed, no dot-entry entered."""
    for folder, subs, names in os.walk(top):  # a linked folder is never entered
        subs[:] = sorted(s for s in subs if not s.startswith("."))
        for name in sorted(names):
            p = Path(folder) / name
            if not name.startswith(".") and p.is_file() and not p.is_symlink():
                yield p


def check_uploads(
    paths: Iterable[str], here: Path, root: Path | None = None, own_keys: Iterable[Path] = ()
) -> tuple[str, ...]:
    """Each upload as the path to push, or a ConfigError naming the first that breaks the rule.
    A relative path is read from `here` (the campaign file's folder); every path must resolve
    inside `root` (default: `here`). `own_keys` are rentwatch's SSH keys."""
    root = here if root is None else root
    try:
        base = root.resolve(strict=True)
    except OSError:
        raise ConfigError(f"upload root {clean(str(root), 300)} does not exist") from None
    if not base.is_dir():
        raise ConfigError(f"upload root {clean(str(root), 300)} is not a folder")
    keys = tuple(own_keys)
    out: list[str] = []
    for raw in paths:
        shown = clean(raw, 300)
        where = here / raw  # an absolute path stays itself: it must still resolve inside
        if not os.path.lexists(where):
            raise ConfigError(f"upload: no such file or folder: {clean(str(where), 300)}")
        if where.is_symlink():
            raise ConfigError(
                f"upload: {shown} is a symlink (never followed): name what it points to"
            )
        real = where.resolve()
        if not real.is_relative_to(base):
            raise ConfigError(
                f"upload: {shown} resolves to {clean(str(real), 300)}, outside the upload root "
                f"{clean(str(base), 300)} (the campaign file's folder, or --upload-root)"
            )
        hidden = [part for part in real.relative_to(base).parts if part.startswith(".")]
        if hidden:
            raise ConfigError(
                f"upload: {shown} is hidden ({clean(hidden[0], 100)}): dotfiles and dot-folders "
                "such as .ssh are never uploaded"
            )
        if real.is_file():
            files = [real]
        elif real.is_dir():
            files = list(folder_files(real))
        else:
            raise ConfigError(f"upload: {shown} is neither a file nor a folder")
        for f in files:
            if _is_own_key(f, keys) or looks_like_key(_head(f), f.name):
                raise ConfigError(
                    f"upload: {clean(str(f), 300)} is a private key: keys never go to a host"
                )
        out.append(str(real))
    return tuple(out)
