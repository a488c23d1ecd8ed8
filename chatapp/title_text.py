"""A title as the list, the heading and the staff pages show it: one line of what it says."""

import unicodedata

# Format characters that are part of what a title says: the joiners of emoji sequences (a
# family, a skin tone's person) and of scripts (Persian's non-joiner), and the tag characters of
# subdivision flags. Every other one (a right-to-left override that reverses the words around
# it, zero-width spaces, a byte order mark) only hides or rearranges them.
_MEANINGFUL_FORMAT = {"\u200c", "\u200d"} | {chr(code) for code in range(0xE0020, 0xE0080)}


def shown_line(text: str) -> str:
    """`text` on one line: every run of whitespace, line breaks included, one space, and no
    control character (a bell, a terminal's escape, NUL) or invisible formatting one."""
    kept = "".join(character for character in " ".join(text.split())
                   if unicodedata.category(character) not in ("Cc", "Cf")
                   or character in _MEANINGFUL_FORMAT)
    return " ".join(kept.split())
