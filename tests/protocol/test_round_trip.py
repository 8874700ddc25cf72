"""Multi round-trip requests: input requests, sealed request state, and answers that do not fit."""

from __future__ import annotations

import httpx

from tests.support.mcp_http import message, post


def test_multi_round_trip_carries_sealed_state_and_refuses_tampering(core: httpx.Client) -> None:
    call = {"name": "test_input_required_result_multi_round", "arguments": {}}
    first = post(core, message("tools/call", call)).json()["result"]
    assert first["resultType"] == "input_required" and set(first["inputRequests"]) == {"step1"}
    answer = {"action": "accept", "content": {"name": "Ada"}}
    second = post(
        core,
        message(
            "tools/call", {**call, "inputResponses": {"step1": answer}, "requestState": first["requestState"]}
        ),
    ).json()["result"]
    assert set(second["inputRequests"]) == {"step2"} and second["requestState"] != first["requestState"]
    tampered = post(
        core,
        message(
            "tools/call",
            {**call, "inputResponses": {"step2": answer}, "requestState": second["requestState"] + "x"},
        ),
    ).json()
    assert tampered["error"]["code"] == -32602
    colour = {"action": "accept", "content": {"color": "teal"}}
    done = post(
        core,
        message(
            "tools/call",
            {**call, "inputResponses": {"step2": colour}, "requestState": second["requestState"]},
        ),
    ).json()["result"]
    assert done["resultType"] == "complete" and done["content"][0]["text"] == "Ada likes teal."


def test_a_malformed_input_response_is_asked_again_not_accepted(core: httpx.Client) -> None:
    call = {
        "name": "test_input_required_result_elicitation",
        "arguments": {},
        "inputResponses": {"user_name": "12345"},
    }
    response = post(core, message("tools/call", call))
    assert response.json().get("result", {}).get("resultType") != "complete"
