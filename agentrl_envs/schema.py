"""Kept importable for code written against it: the names of both wire protocols, re-exported.

The models live in :mod:`agentrl_envs.protocol.agentrl` (AgentRL's wire: statuses, every
client ↔ controller ↔ worker body) and :mod:`agentrl_envs.protocol.openai` (OpenAI's chat
messages, tools, and the model server's API); new code imports from those. This module defines
nothing of its own: each name here *is* the object there (``tests/test_protocol.py`` checks it).
"""

from __future__ import annotations

from .protocol.agentrl import (
    EnvOutput,
    ErrorBody,
    HeartbeatRequest,
    InteractRequest,
    InteractResponse,
    MarkStaleRequest,
    SampleIndex,
    SampleStatus,
    StartSampleRequest,
    StartSampleResponse,
    WorkerCancelRequest,
    WorkerInteractRequest,
    WorkerInteractResponse,
    WorkerStartSampleRequest,
    WorkerStatus,
    client_view,
    interact_response,
    is_renewal,
    start_response,
)
from .protocol.openai import (
    ChatCompletionChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    FunctionCall,
    FunctionDefinition,
    Message,
    ResponsesRequest,
    ToolCall,
    ToolDefinition,
    Usage,
    dump_messages,
    function_call,
    tool_message,
    worked_example,
)

__all__ = [
    "ChatCompletionChoice",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "EnvOutput",
    "ErrorBody",
    "FunctionCall",
    "FunctionDefinition",
    "HeartbeatRequest",
    "InteractRequest",
    "InteractResponse",
    "MarkStaleRequest",
    "Message",
    "ResponsesRequest",
    "SampleIndex",
    "SampleStatus",
    "StartSampleRequest",
    "StartSampleResponse",
    "ToolCall",
    "ToolDefinition",
    "Usage",
    "WorkerCancelRequest",
    "WorkerInteractRequest",
    "WorkerInteractResponse",
    "WorkerStartSampleRequest",
    "WorkerStatus",
    "client_view",
    "dump_messages",
    "function_call",
    "interact_response",
    "is_renewal",
    "start_response",
    "tool_message",
    "worked_example",
]
