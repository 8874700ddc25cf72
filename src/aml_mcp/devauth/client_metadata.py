"""Fetching a Client ID Metadata Document: the one outbound HTTP call of the development issuer.

A client whose `client_id` is an https URL describes itself in a JSON document at that URL; the
issuer fetches it (https only, no redirects, at most 64 KiB) instead of requiring registration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx


def fetch_client_metadata_document(url: str) -> Mapping[str, Any]:
    """Fetches a Client ID Metadata Document: https only, no redirects, small, JSON object."""
    if urlsplit(url).scheme != "https":
        raise ValueError("client metadata documents must be served over https")
    with httpx.Client(timeout=5.0, follow_redirects=False) as http:
        response = http.get(url, headers={"accept": "application/json"})
    if response.status_code != 200 or len(response.content) > 64 * 1024:
        raise LookupError(f"client metadata document unavailable ({response.status_code})")
    document = response.json()
    if not isinstance(document, dict):
        raise ValueError("client metadata document is not a JSON object")
    return document
