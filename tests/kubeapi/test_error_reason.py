"""The restarts metric's reason comes from a known set (issue 33: no label value chosen from
outside): a linked cluster's API server picks its own HTTP statuses."""

from __future__ import annotations

import pytest

from dnsside.kubeapi.client import ApiError, error_reason

pytestmark = pytest.mark.quick


def test_a_status_nobody_names_is_its_class() -> None:
    assert error_reason(ApiError(410, "Gone", "too old")) == "http-410"
    assert error_reason(ApiError(503, "Service Unavailable", "")) == "http-503"
    named = {400, 401, 403, 404, 405, 406, 409, 410, 413, 422, 429, 500, 501, 502, 503, 504}
    reasons = {error_reason(ApiError(status, "x", "")) for status in range(100, 1000)
               if status not in named}
    assert reasons == {"http-4xx", "http-5xx", "http-other"}
