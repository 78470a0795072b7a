"""The gateway's OpenAPI 3.1 document: the request bodies' schemas come from their models
(so their bounds are venn.fields'), the rest is written here and checked in tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from services.gateway.jobs_openapi import add_job_api
from services.gateway.models import CheckinRequest, EnrollmentRequest, ResultRequest

if TYPE_CHECKING:
    from venn.settings import GatewaySettings, Settings

Json = dict[str, Any]


def _error(description: str) -> Json:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _ref(name: str) -> Json:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}


def request_schemas() -> dict[str, Json]:
    """The request bodies as JSON Schemas, generated from the models."""
    _, components = msgspec.json.schema_components(
        (CheckinRequest, ResultRequest, EnrollmentRequest),
        ref_template="#/components/schemas/{name}",
    )
    for name in ("CheckinRequest", "ResultRequest"):
        components[name]["additionalProperties"] = True  # newer device SDKs may send more
    # Read as a number and accepted when integral (models.IntegralIndex): JSON Schema's integer.
    components["ResultRequest"]["properties"]["round_index"]["type"] = "integer"
    components["CheckinRequest"]["properties"]["attrs"]["description"] = (
        "Reported attributes, e.g. cpu_f, ram, fp16_mem, android_os; a job's requirement is "
        "a set of thresholds on them."
    )
    return dict(components)


def openapi_document(settings: Settings) -> Json:
    """The document of this gateway: with authentication (VENN_AUTH_SECRET) its tokens,
    401/403 answers and the enrolment path; without, none of them."""
    doc = _document(settings.gateway)
    if not settings.auth_enabled:
        doc["paths"].pop("/v1/devices")
        doc["components"].pop("securitySchemes")
        for name in ("Enrollment", "EnrollmentRequest"):
            doc["components"]["schemas"].pop(name)
        for path, method in (
            ("/v1/checkin", "post"),
            ("/v1/results", "post"),
            ("/v1/wanted", "get"),
        ):
            operation = doc["paths"][path][method]
            operation.pop("security")
            operation["responses"].pop("401")
        doc["paths"]["/v1/wanted"]["get"]["responses"].pop("403")
        doc["paths"]["/v1/checkin"]["post"]["responses"].pop("403")
        doc["paths"]["/v1/results"]["post"]["responses"]["403"] = _error(
            "The device holds no assignment of that round (`not_assigned`)."
        )
    add_job_api(doc, settings.auth_enabled)
    return doc


def _document(config: GatewaySettings) -> Json:
    wait = config.wait_s
    retry_header = {
        "Retry-After": {
            "description": "Seconds to wait before retrying.",
            "schema": {"type": "integer"},
        }
    }
    unauthorized = _error(
        "No valid device token (`missing_token`, `invalid_token`, `expired_token`, "
        "`revoked_token`), when the deployment authenticates devices."
    )
    unauthorized["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}}}
    forbidden = _error("The token is valid but not this device's (`forbidden`).")
    busy = {
        "description": (
            "The gateway is overloaded (too many check-ins in progress, or a check-in read "
            "so late, after its process stalled, that its answer bound was spent: `late`) or "
            "cannot reach the broker: retry after `retry_after` seconds. Answered at once."
        ),
        "headers": retry_header,
        "content": _ref("Busy"),
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Venn device gateway",
            "version": "1",
            "description": (
                "Devices check in over HTTP and get an assignment (job, round, task URL) or a "
                f"`retry_after`. A check-in is answered within {wait:g} s (VENN_GATEWAY_WAIT_S): "
                "the scheduler only speaks when it assigns, so a check-in no open round can "
                "take is answered at once from the gateway's view of open demand, and one "
                "the scheduler leaves unassigned is answered when the bound expires. Never a 5xx."
            ),
        },
        "paths": {
            "/healthz": {
                "get": {
                    "summary": "Liveness and counters",
                    "responses": {
                        "200": {"description": "Serving", "content": _ref("Health")},
                        "503": {
                            "description": "The broker does not answer: check-ins and results "
                            "are refused with 429 `broker_unavailable` until it does",
                            "content": _ref("Health"),
                        },
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (venn_gateway_*)",
                    "responses": {"200": {"description": "Text exposition format 0.0.4"}},
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "This document",
                    "responses": {"200": {"description": "OpenAPI 3.1 document"}},
                }
            },
            "/v1/checkin": {
                "post": {
                    "summary": "Check in and ask for a task",
                    "operationId": "checkin",
                    "requestBody": {"required": True, "content": _ref("CheckinRequest")},
                    "security": [{"device": []}, {}],
                    "responses": {
                        "200": {"description": "Assigned or not", "content": _ref("CheckinAnswer")},
                        "401": unauthorized,
                        "403": forbidden,
                        "400": _error("The body is not JSON (`malformed_json`)."),
                        "408": _error("The body did not arrive within the bound (`timeout`)."),
                        "413": _error(
                            f"The body exceeds {config.max_body_bytes} bytes (`too_large`)."
                        ),
                        "422": _error(
                            "Missing field, wrong type or value out of range (`invalid_request`)."
                        ),
                        "429": busy,
                    },
                }
            },
            "/v1/results": {
                "post": {
                    "summary": "Upload a device's result (or failure) for its assignment",
                    "operationId": "upload_result",
                    "requestBody": {"required": True, "content": _ref("ResultRequest")},
                    "security": [{"device": []}, {}],
                    "responses": {
                        "202": {
                            "description": "Stored on the broker",
                            "content": _ref("ResultAck"),
                        },
                        "401": unauthorized,
                        "403": _error(
                            "The token is not this device's (`forbidden`), or the device holds "
                            "no assignment of that round (`not_assigned`)."
                        ),
                        "400": _error("The body is not JSON (`malformed_json`)."),
                        "408": _error("The body did not arrive within the bound (`timeout`)."),
                        "413": _error(
                            f"The body exceeds {config.max_body_bytes} bytes (`too_large`)."
                        ),
                        "422": _error(
                            "Missing field, wrong type or value out of range (`invalid_request`)."
                        ),
                        "429": busy,
                    },
                }
            },
            "/v1/wanted": {
                "get": {
                    "summary": "What the open rounds can still use, and the pace",
                    "description": (
                        "The requirements of the rounds open with demand left (a device one "
                        "of them admits, every attribute at least its threshold, may be "
                        "assigned; one none admits is not) and the pace of retry_after. "
                        "Cacheable: an ETag and Cache-Control public, max-age="
                        f"{config.wanted_max_age_s} (VENN_GATEWAY_WANTED_MAX_AGE_S); ask "
                        "again with If-None-Match for a 304 while it holds. A device none "
                        "admits still checks in at the idle pace (its check-ins are the "
                        "supply the scheduler plans with)."
                    ),
                    "operationId": "wanted",
                    "security": [{"device": []}, {}],
                    "parameters": [
                        {"name": "If-None-Match", "in": "header", "schema": {"type": "string"}}
                    ],
                    "responses": {
                        "200": {
                            "description": "The document",
                            "headers": {
                                "ETag": {"schema": {"type": "string"}},
                                "Cache-Control": {"schema": {"type": "string"}},
                            },
                            "content": _ref("Wanted"),
                        },
                        "304": {"description": "The copy named by If-None-Match holds"},
                        "401": unauthorized,
                        "403": forbidden,
                    },
                }
            },
            "/v1/devices": {
                "post": {
                    "summary": "Enrol a device: a device token for the requests above",
                    "operationId": "enroll_device",
                    "security": [{"enroll": []}],
                    "requestBody": {"required": False, "content": _ref("EnrollmentRequest")},
                    "responses": {
                        "201": {"description": "Enrolled", "content": _ref("Enrollment")},
                        "400": _error("The body is not JSON (`malformed_json`)."),
                        "401": unauthorized,
                        "403": _error("The token may not enrol devices (`forbidden`)."),
                        "404": _error("The deployment does not authenticate (`auth_disabled`)."),
                        "408": _error("The body did not arrive within the bound (`timeout`)."),
                        "413": _error(
                            f"The body exceeds {config.max_body_bytes} bytes (`too_large`)."
                        ),
                        "409": _error(
                            "The device_id was enrolled by another enrol token's owner "
                            "(`device_exists`); an admin token may enrol it again."
                        ),
                        "422": _error("A device_id out of range (`invalid_request`)."),
                        "429": _error(
                            "The gateway's view of enrolments is catching up, or the broker did "
                            "not take the enrolment (`view_not_ready`, `broker_unavailable`)."
                        ),
                    },
                }
            },
        },
        "components": {
            "securitySchemes": {
                "device": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "A device token from POST /v1/devices (required when the "
                    "deployment sets VENN_AUTH_SECRET).",
                },
                "enroll": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "An enrol (or admin) token: `venn token enroll`.",
                },
            },
            "schemas": {
                **request_schemas(),
                "Enrollment": {
                    "type": "object",
                    "required": ["device_id", "token", "expires_at"],
                    "properties": {
                        "device_id": {"type": "string"},
                        "token": {"type": "string"},
                        "expires_at": {"type": "number"},
                    },
                },
                "Wanted": {
                    "type": "object",
                    "required": ["complete", "requirements", "pace"],
                    "properties": {
                        "complete": {
                            "type": "boolean",
                            "description": "False while the gateway has not read the open "
                            "rounds to their end: check in at the base pace.",
                        },
                        "requirements": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": {"type": "number"},
                                "description": "Attribute -> minimum, all to be met.",
                            },
                        },
                        "pace": {
                            "type": "object",
                            "required": ["wanted_s", "base_s", "idle_s", "jitter"],
                            "properties": {
                                "wanted_s": {"type": "number"},
                                "base_s": {"type": "number"},
                                "idle_s": {"type": "number"},
                                "jitter": {"type": "number"},
                            },
                        },
                    },
                },
                "CheckinAnswer": {
                    "oneOf": [
                        {"$ref": "#/components/schemas/Assigned"},
                        {"$ref": "#/components/schemas/NotAssigned"},
                    ]
                },
                "Assigned": {
                    "type": "object",
                    "required": ["assigned", "job_id", "round_index", "task_url", "checkin_id"],
                    "properties": {
                        "assigned": {"const": True},
                        "job_id": {"type": "string"},
                        "round_index": {"type": "integer", "minimum": 0},
                        "task_url": {"type": "string"},
                        "checkin_id": {"type": "string"},
                    },
                },
                "NotAssigned": {
                    "type": "object",
                    "required": ["assigned", "retry_after", "reason", "checkin_id"],
                    "properties": {
                        "assigned": {"const": False},
                        "retry_after": {
                            "type": "integer",
                            "minimum": 1,
                            "description": (
                                "Seconds until the device should check in again, steered by "
                                "demand: sooner while an open round that admits the device "
                                "waits for devices (VENN_GATEWAY_WANTED_RETRY_AFTER_S), "
                                "later when no open round admits it "
                                "(VENN_GATEWAY_IDLE_RETRY_AFTER_S, the bound), each "
                                "jittered (VENN_GATEWAY_RETRY_JITTER)."
                            ),
                        },
                        "reason": {"enum": ["no_open_round", "no_assignment"]},
                        "checkin_id": {"type": "string"},
                    },
                },
                "Busy": {
                    "type": "object",
                    "required": ["assigned", "retry_after", "reason"],
                    "properties": {
                        "assigned": {"const": False},
                        "retry_after": {"type": "integer", "minimum": 0},
                        "reason": {
                            "enum": ["overloaded", "late", "broker_unavailable", "gateway_error"]
                        },
                    },
                },
                "ResultAck": {
                    "type": "object",
                    "required": ["accepted", "event_id"],
                    "properties": {
                        "accepted": {"const": True},
                        "event_id": {"type": "string"},
                    },
                },
                "Error": {
                    "type": "object",
                    "required": ["error", "detail"],
                    "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
                },
                "Health": {
                    "type": "object",
                    "required": ["status", "broker", "stats"],
                    "properties": {
                        "status": {"enum": ["ok", "broker_unavailable"]},
                        "broker": {
                            "type": "object",
                            "required": ["broker", "available"],
                            "properties": {
                                "broker": {"type": "string"},
                                "available": {"type": "boolean"},
                                "seconds_since_answer": {"type": "number"},
                                "failed_checks": {"type": "integer"},
                            },
                        },
                        "demand_view_ready": {"type": "boolean"},
                        "inflight": {"type": "integer"},
                        "pending": {"type": "integer"},
                        "stats": {"type": "object"},
                    },
                },
            },
        },
    }
