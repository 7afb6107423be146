"""cosign's encrypted private keys sign `warden push`: a key sealed as `cosign
generate-key-pair` seals it (go-securesystemslib's format: scrypt from the password, then NaCl's
secretbox over the PKCS#8 key), made here by independent implementations (Python's hashlib
scrypt, libsodium through PyNaCl, `cryptography` for the key), pushed to a real registry
(Debian's docker-registry on 127.0.0.1) and verified back by `warden add --key`."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import textwrap
import time
from pathlib import Path

import nacl.secret
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from harness import WASM, warden_bin

REGISTRY = Path("/usr/bin/docker-registry")
PASSWORD = b"correct horse battery staple"


def cosign_key(path: Path, password: bytes) -> Path:
    """Writes a P-256 key as cosign's encrypted PEM at `path`, its public key beside it."""
    key = ec.generate_private_key(ec.SECP256R1())
    der = key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    salt, nonce = os.urandom(32), os.urandom(24)
    box_key = hashlib.scrypt(password, salt=salt, n=32768, r=8, p=1, maxmem=64 << 20, dklen=32)
    sealed = nacl.secret.SecretBox(box_key).encrypt(der, nonce).ciphertext
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    document = {
        "kdf": {"name": "scrypt", "params": {"N": 32768, "r": 8, "p": 1}, "salt": b64(salt)},
        "cipher": {"name": "nacl/secretbox", "nonce": b64(nonce)},
        "ciphertext": b64(sealed),
    }
    body = "\n".join(textwrap.wrap(b64(json.dumps(document).encode()), 64))
    path.write_text(
        f"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n{body}\n"
        "-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    path.with_suffix(".pub").write_bytes(public)
    return path


@pytest.fixture
def registry(tmp_path):
    if not REGISTRY.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {REGISTRY} is missing (.ci/run installs docker-registry)")
        pytest.skip(f"{REGISTRY} is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {tmp_path / 'registry'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen([str(REGISTRY), "serve", str(config)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("the registry did not start")
            time.sleep(0.05)
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def warden(side: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "COSIGN_PASSWORD"}
    environment.update(WARDEN_TOOLBOX=str(side / "policies"), WARDEN_HOME=str(side / "home"))
    environment.update(env)
    return subprocess.run(
        [str(warden_bin()), *args], env=environment, capture_output=True, text=True, timeout=120
    )


def test_a_cosign_encrypted_key_signs_with_its_password(tmp_path, registry):
    publisher, consumer = tmp_path / "publisher", tmp_path / "consumer"
    for side in (publisher, consumer):
        (side / "policies").mkdir(parents=True)
    shutil.copy(WASM / "trivial.wasm", tmp_path / "trivial.wasm")
    added = warden(publisher, "add", str(tmp_path / "trivial.wasm"))
    assert added.returncode == 0, added.stderr
    key = cosign_key(tmp_path / "cosign.key", PASSWORD)
    reference = f"oci://{registry}/tools/trivial:1"

    missing = warden(publisher, "push", "trivial", reference, "--sign", str(key))
    assert missing.returncode == 2
    assert "set COSIGN_PASSWORD" in missing.stderr, missing.stderr
    wrong = warden(
        publisher, "push", "trivial", reference, "--sign", str(key), COSIGN_PASSWORD="nope"
    )
    assert wrong.returncode == 2
    assert "does not open with COSIGN_PASSWORD" in wrong.stderr, wrong.stderr

    pushed = warden(
        publisher, "push", "trivial", reference, "--sign", str(key),
        COSIGN_PASSWORD=PASSWORD.decode(),
    )
    assert pushed.returncode == 0, pushed.stderr
    assert "signed by sha256:" in pushed.stdout, pushed.stdout
    taken = warden(consumer, "add", reference, "--key", str(key.with_suffix(".pub")))
    assert taken.returncode == 0, taken.stderr
    assert "signed by sha256:" in taken.stdout, taken.stdout
    answer = warden(consumer, "call", "add", '{"a": 20, "b": 22}')
    assert json.loads(answer.stdout)["content"] == "42", answer.stdout + answer.stderr
