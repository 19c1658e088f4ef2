"""MLflow's error shape: ``{"error_code": ..., "message": ...}`` with the HTTP status its client expects."""

from __future__ import annotations

from django.http import JsonResponse

from apps.core.errors import ServiceError

STATUS_OF_CODE = {
    "INVALID_PARAMETER_VALUE": 400,
    "RESOURCE_ALREADY_EXISTS": 400,
    "INVALID_STATE": 400,
    "BAD_REQUEST": 400,
    "MALFORMED_REQUEST": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "RESOURCE_DOES_NOT_EXIST": 404,
    "ENDPOINT_NOT_FOUND": 404,
    "INTERNAL_ERROR": 500,
}


class MlflowError(Exception):
    def __init__(self, error_code: str, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @property
    def status(self) -> int:
        return STATUS_OF_CODE.get(self.error_code, 400)

    def response(self) -> JsonResponse:
        return JsonResponse({"error_code": self.error_code, "message": self.message}, status=self.status)


def invalid(field: str, message: str) -> MlflowError:
    return MlflowError("INVALID_PARAMETER_VALUE", f"{field}: {message}")


def does_not_exist(message: str) -> MlflowError:
    return MlflowError("RESOURCE_DOES_NOT_EXIST", message)


def from_service_error(exc: ServiceError) -> MlflowError:
    """A Trainyard service's refusal in MLflow's terms, keeping its message and the fields it names."""
    code = {404: "RESOURCE_DOES_NOT_EXIST", 403: "PERMISSION_DENIED", 409: "INVALID_STATE"}.get(
        exc.status_code, "INVALID_PARAMETER_VALUE")
    message = exc.message
    if exc.fields:
        named = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in exc.fields.items())
        message = named if message in named else f"{message} ({named})"
    return MlflowError(code, message)
