"""Small builders for rows the tests need; each returns a saved object."""

import itertools

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from chatapp.models import Conversation, Generation, Message
from chatapp.staff.permissions import REVIEW_ANSWERS, STOP_ANSWERS
from common.vocabulary import status_for

_numbers = itertools.count(1)


def user(**fields):
    number = next(_numbers)
    fields.setdefault("username", f"user{number}")
    password = fields.pop("password", "a-long-test-password")
    return get_user_model().objects.create_user(password=password, **fields)


def staff_member(*granted: str, **fields):
    """A staff member granted `granted` ("chatapp.view_generation", ...): by default what the
    staff pages ask, reviewing every user's answers and stopping them."""
    member = user(is_staff=True, **fields)
    codenames = [name.split(".", 1)[1] for name in granted or (REVIEW_ANSWERS, STOP_ANSWERS)]
    member.user_permissions.set(Permission.objects.filter(content_type__app_label="chatapp",
                                                          codename__in=codenames))
    return member


def conversation(owner=None, **fields):
    return Conversation.objects.create(owner=owner or user(), **fields)


def message(conversation_=None, **fields):
    fields.setdefault("role", Message.Role.USER)
    return Message.objects.create(conversation=conversation_ or conversation(), **fields)


def generation(message_=None, **fields):
    message_ = message_ or message(role=Message.Role.ASSISTANT)
    fields.setdefault("model", "SmolLM2-135M-Instruct")
    if fields.get("finish_reason"):  # an ended generation: its status says how
        fields.setdefault("status", status_for(fields["finish_reason"]))
    return Generation.objects.create(
        user=message_.conversation.owner, conversation=message_.conversation, message=message_,
        **fields,
    )
