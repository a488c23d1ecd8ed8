"""Reliability suites (soak; faults next) and the harness they share: the whole stack started
in a database of its own, signed-in chat clients, resource sampling, and end checks."""

from .chat_client import Answer, ChatClient, Ending, Outcome
from .resources import ResourceSampler, growth
from .stack_under_test import Role, StackConfig, StackUnderTest, stack_under_test

__all__ = ["Answer", "ChatClient", "Ending", "Outcome", "ResourceSampler", "growth", "Role",
           "StackConfig", "StackUnderTest", "stack_under_test"]
