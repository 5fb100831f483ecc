"""A signup view: the user row and its welcome job commit together, or neither does."""

from __future__ import annotations

import json

from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from jobs.integrations import django as tockwork


def signup(request: HttpRequest) -> HttpResponse:
    data = json.loads(request.body)
    with transaction.atomic():
        user = User.objects.create_user(username=data["username"], email=data["email"])
        tockwork.enqueue("send_welcome", {"user_id": user.id}, queue="emails")
        if data.get("fail"):  # a failure after the enqueue rolls both back
            raise ValueError("signup failed after the user was created")
    return JsonResponse({"id": user.id}, status=201)
