"""A tool module written the FastMCP way: no context parameter, bare ``@server.tool``, rich hints.

Shared by tests/protocol/test_tool_types.py (every transport serves the same schemas).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, Field

from trio_mcp_cancel.server import McpServer

server = McpServer("typed-tools")

#: What each call of ``book`` received, as (name, value) pairs, for the tests to check.
RECEIVED: list[dict[str, Any]] = []


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


class Person(BaseModel):
    name: str
    age: int = Field(ge=0)


class Booking(BaseModel):
    who: str
    at: datetime.datetime
    seats: int


@server.tool
async def book(
    person: Person,
    at: datetime.datetime,
    tags: list[str],
    mode: Literal["fast", "slow"],
    color: Color,
    where: Point,
    note: Optional[str] = None,  # noqa: UP045 (the spelling a user writes)
    seats: Annotated[int, Field(ge=1, le=10, description="how many seats")] = 1,
) -> Booking:
    """Book seats for a person."""
    RECEIVED.append(
        {
            "person": person,
            "at": at,
            "tags": tags,
            "mode": mode,
            "color": color,
            "where": where,
            "note": note,
            "seats": seats,
        }
    )
    return Booking(who=person.name, at=at, seats=seats)
