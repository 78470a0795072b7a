"""The job API's part of the gateway's OpenAPI document (`services.gateway.jobs_api`)."""

from __future__ import annotations

from typing import Any

import msgspec

from venn.jobspec import JobSubmission

Json = dict[str, Any]


def _error(description: str) -> Json:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _ok(description: str, schema: str) -> Json:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }


JOB_ID = {
    "name": "job_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": 128},
}
NOT_READY = _error(
    "The gateway's job view is still catching up, or the broker does not answer "
    "(`view_not_ready`, `broker_unavailable`): retry after Retry-After seconds."
)
NO_JOBS_PRINCIPAL = _error(
    "This gateway serves devices only: it has no credentials of the Kafka principal that "
    "writes venn.jobs (`no_jobs_principal`)."
)


def job_schemas() -> dict[str, Json]:
    _, components = msgspec.json.schema_components(
        (JobSubmission,), ref_template="#/components/schemas/{name}"
    )
    nullable_number = {"type": ["number", "null"]}
    job = {
        "type": "object",
        "required": ["job_id", "state", "round", "rounds", "rounds_done", "waiting"],
        "properties": {
            "job_id": {"type": "string"},
            "state": {
                "enum": [
                    "queued",
                    "refused",
                    "submitted",
                    "running",
                    "finished",
                    "failed",
                    "cancelled",
                    "expired",
                ]
            },
            "round": {"type": "integer", "description": "k of `round k of n`"},
            "rounds": {"type": ["integer", "null"], "description": "n"},
            "rounds_done": {"type": "integer"},
            "rounds_failed": {"type": "integer"},
            "open_round": {
                "type": ["object", "null"],
                "description": "The open round: its demand and the assignments seen for it.",
            },
            "sched_delay_s": {"type": "number"},
            "response_time_s": {"type": "number"},
            "waiting": {
                "enum": [
                    None,
                    "waiting_for_coordinator",
                    "no_eligible_supply",
                    "group_starved",
                    "outranked",
                    "unknown",
                ],
                "description": "Why the job does not progress now (null: it does, or ended).",
            },
            "jct_s": nullable_number,
            "estimated_finish": {
                "type": ["number", "null"],
                "description": "The scheduler's completion estimate (seconds, the epoch): "
                "its P50 over scenarios of the jobs expected to arrive later.",
            },
            "estimated_remaining_s": nullable_number,
            "estimated_finish_p90": {
                "type": ["number", "null"],
                "description": "The same estimate's P90 (null: none, or not at this supply).",
            },
            "estimated_remaining_p90_s": nullable_number,
            "estimate_state": {
                "enum": [None, "estimated", "never"],
                "description": "never: it cannot finish at the current supply; null: no "
                "estimate (ended, or no fresh snapshot holds it).",
            },
            "admission": {
                "type": ["object", "null"],
                "description": "The latest admission decision: decision, reason, estimate.",
            },
        },
    }
    return {
        **components,
        "Job": job,
        "JobList": {
            "type": "object",
            "required": ["jobs"],
            "properties": {
                "jobs": {"type": "array", "items": {"$ref": "#/components/schemas/Job"}}
            },
        },
        "Submitted": {
            "type": "object",
            "required": ["job_id", "token", "created", "coordinator"],
            "properties": {
                "job_id": {"type": "string"},
                "token": {"type": ["string", "null"], "description": "A job token: this job only"},
                "created": {"type": "boolean"},
                "coordinator": {"type": "string"},
                "state": {"const": "queued", "description": "Only when queued (202)."},
                "detail": {"type": "string", "description": "Why it was queued (202)."},
                "estimated_finish": {"type": ["number", "null"]},
                "estimated_finish_p90": {"type": ["number", "null"]},
                "warning": {
                    "type": ["string", "null"],
                    "description": "Admitted although its estimate misses finish_by.",
                },
            },
        },
        "Cancelling": {
            "type": "object",
            "required": ["job_id", "state"],
            "properties": {"job_id": {"type": "string"}, "state": {"const": "cancelling"}},
        },
        "Plan": {
            "type": "object",
            "required": ["available", "job_groups", "device_groups"],
            "properties": {
                "available": {"type": "boolean"},
                "job_groups": {"type": "array"},
                "device_groups": {"type": "array"},
            },
        },
        "Supply": {
            "type": "object",
            "required": ["available", "device_groups", "job_groups"],
            "properties": {
                "available": {"type": "boolean"},
                "checkin_rate_per_s": {"type": "number"},
                "device_groups": {"type": "array"},
                "job_groups": {"type": "array"},
            },
        },
    }


def add_job_api(doc: Json, auth: bool) -> None:
    """Add the job API's paths, schemas and (with ``auth``) its token scheme to ``doc``."""
    operator: list[Json] = [{"operator": []}] if auth else []
    owner: list[Json] = [{"operator": []}, {"job": []}] if auth else []
    unauthorized = _error("No valid token (`missing_token`, `invalid_token`, ...).")
    forbidden = _error("The token may not do this, or not on this job (`forbidden`).")

    def responses(ok: Json, *extra: tuple[str, Json]) -> Json:
        out = {"200": ok}
        if auth:
            out["401"] = unauthorized
            out["403"] = forbidden
        out.update(dict(extra))
        out["429"] = NOT_READY
        return out

    def op(summary: str, op_id: str, security: list[Json], resp: Json, **more: Any) -> Json:
        body: Json = {"summary": summary, "operationId": op_id, "responses": resp, **more}
        if auth:
            body["security"] = security
        return body

    submit_responses: Json = {
        "201": _ok("Registered on venn.jobs", "Submitted"),
        "200": _ok("The same submission again (same submit_token)", "Submitted"),
        "400": _error("Not JSON or YAML, or not a mapping (`malformed_spec`)."),
        "408": _error("The body did not arrive in time (`timeout`)."),
        "202": _ok("Queued (`?queue=true`): admitted in order as limits allow", "Submitted"),
        "409": _error(
            "A job with this id exists (`job_exists`), or admission refused it: "
            "`no_eligible_supply`, `too_little_supply`, `running_jobs_limit`, "
            "`open_demand_limit` (with `counts`), `finish_by_missed` (with "
            "`estimated_finish`)."
        ),
        "413": _error("The body is too large (`too_large`)."),
        "422": _error("A field missing, unknown, of the wrong type or out of range."),
        "429": NOT_READY,
        "503": NO_JOBS_PRINCIPAL,
    }
    if auth:
        submit_responses["401"] = unauthorized
        submit_responses["403"] = forbidden
    paths = doc["paths"]
    paths["/v1/jobs"] = {
        "post": op(
            "Submit a job (JSON or YAML spec); answers its id and a job token for it",
            "submit_job",
            owner,
            submit_responses,
            parameters=[
                {
                    "name": "queue",
                    "in": "query",
                    "required": False,
                    "schema": {"enum": ["true", "false"]},
                    "description": "Queue the job rather than refuse it for a limit or supply.",
                },
                {
                    "name": "accept_late",
                    "in": "query",
                    "required": False,
                    "schema": {"enum": ["true", "false"]},
                    "description": "Admit it with a warning if its estimate misses finish_by.",
                },
                {
                    "name": "finish_by",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "number", "minimum": 0, "maximum": 1e11},
                    "description": "When it must be done (seconds, the epoch; overrides the "
                    "spec's finish_by).",
                },
            ],
            requestBody={
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/JobSubmission"}},
                },
            },
            description=(
                "A JSON body (or the same as YAML, Content-Type application/yaml). "
                "Registers the job on venn.jobs. Its rounds are run by an external "
                "coordinator (venn.sdk.VennClient) holding the returned job token; a job "
                "whose coordinator stays silent is expired after VENN_JOB_TIMEOUT_S."
            ),
        ),
        "get": op(
            "Every job and its status",
            "list_jobs",
            operator,
            responses(_ok("The jobs, newest first", "JobList")),
        ),
    }
    paths["/v1/jobs/{job_id}"] = {
        "get": op(
            "One job: state, round k of n, demand met, delays, why it waits",
            "job_status",
            owner,
            responses(_ok("The job", "Job"), ("404", _error("No such job (`unknown_job`)."))),
            parameters=[JOB_ID],
        ),
        "delete": op(
            "Cancel a job",
            "cancel_job",
            owner,
            {
                "202": _ok("The cancel is on venn.jobs", "Cancelling"),
                **({"401": unauthorized, "403": forbidden} if auth else {}),
                "404": _error("No such job (`unknown_job`)."),
                "409": _error("The job ended already (`job_ended`)."),
                "429": NOT_READY,
                "503": NO_JOBS_PRINCIPAL,
            },
            parameters=[JOB_ID],
        ),
    }
    paths["/v1/plan"] = {
        "get": op(
            "Which device groups feed which job group",
            "plan",
            operator,
            responses(_ok("The latest plan the scheduler published", "Plan")),
        )
    }
    devices = paths.setdefault("/v1/devices", {})
    devices["get"] = op(
        "Devices seen and check-in rate per eligibility group",
        "supply",
        operator,
        responses(_ok("The latest supply the scheduler published", "Supply")),
    )
    if not auth and "post" not in devices:
        devices["post"] = {
            "summary": "Enrol a device: only where the deployment authenticates",
            "operationId": "enroll_device",
            "responses": {"404": _error("No authentication here (`auth_disabled`).")},
        }
    doc["components"]["schemas"].update(job_schemas())
    if auth:
        schemes = doc["components"].setdefault("securitySchemes", {})
        schemes["operator"] = {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "An operator's token: `venn token admin`.",
        }
        schemes["job"] = {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "A job token: the one a submission returns, or `venn token job`.",
        }
