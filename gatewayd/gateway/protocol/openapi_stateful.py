"""The OpenAPI document's stateful paths: the Responses API, files and batches.

Their shapes are OpenAI's own (``Response``, ``OpenAIFile``, ``Batch`` in
OpenAI's published description); the schemas here name the fields the gateway
reads or writes and leave the rest open, as the other request schemas do.
"""

from __future__ import annotations

from collections.abc import Callable

from gatewayd.gateway.protocol.openapi_schemas import _obj, _opt, _ref

_STRING = {"type": "string"}
_INT = {"type": "integer"}


def _id(name: str, what: str) -> dict:
    return {"name": name, "in": "path", "required": True, "description": what, "schema": _STRING}


def paths(json: Callable, errors: Callable, parameters: list) -> dict:
    """The paths, built with the document's own ``_json``/``_errors`` helpers."""

    def op(operation_id, summary, ok, codes, *, body=None, params=(), stream=False):
        answer = json(summary, ok)
        if stream:
            answer["description"] += "; with `stream: true`, OpenAI's Responses events"
            answer["content"]["text/event-stream"] = {
                "schema": {
                    "type": "string",
                    "description": "response.created, response.in_progress, output item,"
                    " content part and output_text delta/done events, then"
                    " response.completed (or response.incomplete / response.failed), each"
                    " with its sequence_number.",
                }
            }
        out = {
            "operationId": operation_id,
            "summary": summary,
            "responses": {"200": answer, **errors(codes)},
        }
        if params:
            out["parameters"] = list(params)
        if body is not None:
            out["requestBody"] = {"required": True, "content": body}
        return out

    json_body = {"application/json": {"schema": _ref("ResponseRequest")}}
    upload = {
        "multipart/form-data": {
            "schema": _obj(
                {
                    "file": {"type": "string", "contentEncoding": "binary"},
                    "purpose": {"type": "string", "enum": ["batch"]},
                },
                ("file", "purpose"),
            )
        }
    }
    rid = _id("response_id", "A stored response's id (resp_…)")
    fid = _id("file_id", "A file's id (file-…)")
    bid = _id("batch_id", "A batch's id (batch_…)")
    served = ("400", "401", "403", "404", "429", "502", "503", "504")
    return {
        "/v1/responses": {
            "post": {
                **op(
                    "createResponse",
                    "A response (OpenAI's Responses API), whole or streamed",
                    _ref("Response"),
                    served,
                    body=json_body,
                    params=parameters,
                    stream=True,
                ),
            }
        },
        "/v1/responses/{response_id}": {
            "get": op(
                "getResponse",
                "A stored response (projects that keep them)",
                _ref("Response"),
                ("400", "401", "404"),
                params=[rid],
            ),
            "delete": op(
                "deleteResponse",
                "Forget a stored response",
                _ref("Deleted"),
                ("400", "401", "404"),
                params=[rid],
            ),
        },
        "/v1/responses/{response_id}/input_items": {
            "get": op(
                "listInputItems",
                "The items a stored response was given",
                _ref("ItemList"),
                ("400", "401", "404"),
                params=[rid],
            ),
        },
        "/v1/files": {
            "post": op(
                "createFile",
                "Upload a file for a batch (purpose batch)",
                _ref("File"),
                ("400", "401", "413"),
                body=upload,
            ),
            "get": op("listFiles", "This key's project's files", _ref("FileList"), ("401",)),
        },
        "/v1/files/{file_id}": {
            "get": op("retrieveFile", "One file", _ref("File"), ("401", "404"), params=[fid]),
            "delete": op(
                "deleteFile", "Delete a file", _ref("Deleted"), ("401", "404"), params=[fid]
            ),
        },
        "/v1/files/{file_id}/content": {
            "get": {
                "operationId": "downloadFile",
                "summary": "A file's bytes (a batch's output and error files are JSONL)",
                "parameters": [fid],
                "responses": {
                    "200": {
                        "description": "The file",
                        "content": {"application/octet-stream": {"schema": _STRING}},
                    },
                    **errors(("401", "404")),
                },
            }
        },
        "/v1/batches": {
            "post": op(
                "createBatch",
                "Run a file of requests within 24 h, as replicas have room",
                _ref("Batch"),
                ("400", "401", "404"),
                body={"application/json": {"schema": _ref("BatchRequest")}},
            ),
            "get": op(
                "listBatches",
                "This key's project's batches, newest first",
                _ref("BatchList"),
                ("401",),
            ),
        },
        "/v1/batches/{batch_id}": {
            "get": op(
                "retrieveBatch",
                "One batch with its progress",
                _ref("Batch"),
                ("401", "404"),
                params=[bid],
            ),
        },
        "/v1/batches/{batch_id}/cancel": {
            "post": op(
                "cancelBatch",
                "Stop a batch; what was answered stays in its output",
                _ref("Batch"),
                ("401", "404"),
                params=[bid],
            ),
        },
    }


def schemas() -> dict:
    open_object = {"type": "object"}
    listed = lambda item: _obj(
        {
            "object": {"const": "list"},
            "data": {"type": "array", "items": item},
            "has_more": {"type": "boolean"},
        },
        ("object", "data"),
    )
    return {
        "ResponseRequest": _obj(
            {
                "model": _STRING,
                "input": {"type": ["string", "array"]},
                "instructions": _opt("string"),
                "tools": _opt("array"),
                "tool_choice": {"type": ["string", "object", "null"]},
                "text": _opt("object"),
                "max_output_tokens": _opt("integer", minimum=1),
                "temperature": _opt("number", minimum=0, maximum=2),
                "top_p": _opt("number", minimum=0, maximum=1),
                "reasoning": _opt("object"),
                "stream": _opt("boolean"),
                "store": _opt(
                    "boolean",
                    description="Kept only where the key's project"
                    " keeps responses (llmgw ctl project retention); false by default.",
                ),
                "previous_response_id": _opt("string"),
            },
            ("model", "input"),
        ),
        "Response": _obj(
            {
                "id": _STRING,
                "object": {"const": "response"},
                "status": _STRING,
                "model": _STRING,
                "output": {"type": "array"},
                "usage": _opt("object"),
            },
            ("id", "object", "status", "model", "output"),
        ),
        "ItemList": listed(open_object),
        "Deleted": _obj(
            {"id": _STRING, "object": _STRING, "deleted": {"type": "boolean"}}, ("id", "deleted")
        ),
        "File": _obj(
            {
                "id": _STRING,
                "object": {"const": "file"},
                "bytes": _INT,
                "created_at": _INT,
                "expires_at": _INT,
                "filename": _STRING,
                "purpose": _STRING,
            },
            ("id", "object", "bytes", "created_at", "filename", "purpose"),
        ),
        "FileList": listed(_ref("File")),
        "BatchRequest": _obj(
            {
                "input_file_id": _STRING,
                "endpoint": {"enum": ["/v1/chat/completions", "/v1/embeddings", "/v1/responses"]},
                "completion_window": {"const": "24h"},
                "metadata": _opt("object"),
            },
            ("input_file_id", "endpoint", "completion_window"),
        ),
        "Batch": _obj(
            {
                "id": _STRING,
                "object": {"const": "batch"},
                "endpoint": _STRING,
                "status": {
                    "enum": [
                        "validating",
                        "failed",
                        "in_progress",
                        "finalizing",
                        "completed",
                        "expired",
                        "cancelling",
                        "cancelled",
                    ]
                },
                "input_file_id": _STRING,
                "output_file_id": _STRING,
                "error_file_id": _STRING,
                "completion_window": _STRING,
                "created_at": _INT,
                "request_counts": _obj({"total": _INT, "completed": _INT, "failed": _INT}),
            },
            (
                "id",
                "object",
                "endpoint",
                "status",
                "input_file_id",
                "completion_window",
                "created_at",
            ),
        ),
        "BatchList": listed(_ref("Batch")),
    }
