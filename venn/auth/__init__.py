"""Authentication and authorization: signed tokens for devices, job owners and operators."""

from venn.auth.checks import check_job_event
from venn.auth.tokens import AuthError, Claims, Kind, Revocations, Tokens, bearer

__all__ = ["AuthError", "Claims", "Kind", "Revocations", "Tokens", "bearer", "check_job_event"]
