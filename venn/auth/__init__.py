"""Authentication and authorization: signed tokens for devices, job owners and operators."""

from venn.auth.tokens import AuthError, Claims, Kind, Revocations, Tokens, bearer

__all__ = ["AuthError", "Claims", "Kind", "Revocations", "Tokens", "bearer"]
