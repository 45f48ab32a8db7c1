"""Opening an fsspec URL the way every rivermark writer of object storage does.

The checkpoint store (:mod:`rivermark.checkpoint.stores.objectstore`) and the
file sinks (:mod:`rivermark.lake.files`) open their locations here, so an
S3 client behaves the same under both: it fails in seconds, not minutes,
when the endpoint is unreachable (connect, read and retry limits below,
unless ``storage_options`` says otherwise), fsspec's instance and listing
caches are off (a writer must see what it wrote), and s3fs does not retry
a request botocore retried already.  Credentials, endpoint and region come
from ``storage_options`` or fsspec's usual sources (``AWS_ACCESS_KEY_ID``,
``AWS_ENDPOINT_URL``, ``~/.aws``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rivermark.errors import ConfigurationError

__all__ = ["DEFAULT_TIMEOUT", "S3_SCHEMES", "open_filesystem", "s3_defaults", "s3_options"]

#: seconds an S3 client waits for an answer unless told otherwise
DEFAULT_TIMEOUT = 30.0
#: the URL schemes that s3fs serves
S3_SCHEMES = ("s3", "s3a")


def s3_defaults(timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """S3 client settings unless storage_options says otherwise: fail within ``timeout``.

    >>> s3_defaults(10.0)["config_kwargs"]["read_timeout"]
    10.0
    """
    return {
        "skip_instance_cache": True,
        "use_listings_cache": False,
        "config_kwargs": {
            "connect_timeout": min(5.0, timeout),
            "read_timeout": timeout,
            "retries": {"max_attempts": 3, "mode": "standard"},
        },
    }


def s3_options(
    scheme: str, storage_options: Mapping[str, object] | None, timeout: float = DEFAULT_TIMEOUT
) -> dict[str, object]:
    """``storage_options`` over :func:`s3_defaults` for an S3 ``scheme``; as given for others.

    A key the caller gives replaces the default of that key as a whole (the
    caller's dict is not changed).

    >>> s3_options("s3", {"use_listings_cache": True})["use_listings_cache"]
    True
    >>> s3_options("gs", {"token": "anon"})
    {'token': 'anon'}
    """
    options = dict(storage_options or {})
    if scheme in S3_SCHEMES:
        return {**s3_defaults(timeout), **options}
    return options


def open_filesystem(url: str, options: Mapping[str, object], who: str) -> tuple[Any, str]:
    """fsspec's filesystem for ``url`` and the path of ``url`` on it (no trailing ``/``).

    ``options`` go to ``fsspec.url_to_fs`` as they are (see
    :func:`s3_options`).  A missing fsspec, or a scheme no installed package
    serves, is one :class:`ConfigurationError` line starting with ``who``
    that names the package to install.
    """
    try:
        import fsspec
    except ImportError:
        raise ConfigurationError(
            f"{who} needs fsspec (and s3fs for s3://): pip install 'rivermark[objectstore]'"
        ) from None
    scheme = url.split("://", 1)[0]
    try:
        fs, root = fsspec.url_to_fs(url, **options)
    except (ImportError, ValueError) as e:
        raise ConfigurationError(
            f"{who}: fsspec cannot open {scheme!r} URLs ({e}); install the filesystem package "
            "(s3fs for s3://, gcsfs for gs://, adlfs for abfs://)"
        ) from None
    # optional: an S3 filesystem other than s3fs may have no retry loop of its own
    if scheme in S3_SCHEMES and hasattr(fs, "retries"):
        fs.retries = 2  # s3fs's own loop on top of botocore's attempts: not 5 times
    return fs, str(root).rstrip("/")
