"""SQLite's LIKE as PostgreSQL's ILIKE matches: case folded in every script, not only ASCII.

SQLite's own LIKE folds the case of ASCII letters only, so on `make run`'s database a search
for "émile" missed "Émile" and one for "ça" missed "ÇA" (Django's icontains, and contains too,
is a LIKE there). A search's pattern starts with "%", so no index served the LIKE this replaces;
in Python it reads about ten times slower than SQLite's own (100,000 messages of 500 characters
in about a second on a busy 2-core machine), for `make run`'s single-user database.
"""

import functools
import re
from collections.abc import Callable


def matches(pattern: str | None, value: str | None, escape: str | None = None) -> bool | None:
    """`value LIKE pattern ESCAPE escape` (SQLite calls like(pattern, value, escape))."""
    if pattern is None or value is None:
        return None
    return _matcher(pattern, escape)(value)


@functools.lru_cache(maxsize=256)
def _matcher(pattern: str, escape: str | None) -> Callable[[str], bool]:
    pieces, index = [], 0  # a regular expression's pieces, one for each character of the pattern
    while index < len(pattern):
        character = pattern[index]
        if character == escape and index + 1 < len(pattern):
            pieces.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        pieces.append({"%": ".*", "_": "."}.get(character) or re.escape(character))
        index += 1
    if len(pieces) >= 2 and pieces[0] == pieces[-1] == ".*":
        # "%words%", a search: found anywhere, with no backtracking over a leading ".*".
        found = re.compile("".join(pieces[1:-1]), re.IGNORECASE | re.DOTALL).search
        return lambda value: found(value) is not None
    whole = re.compile("".join(pieces), re.IGNORECASE | re.DOTALL).fullmatch
    return lambda value: whole(value) is not None
