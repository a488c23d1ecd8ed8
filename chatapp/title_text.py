"""A title as the list, the heading and the staff pages show it: one line of what it says."""

import unicodedata

import regex

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


def cut_between_glyphs(text: str, limit: int) -> str:
    """The longest start of `text` of at most `limit` code points that ends between two
    characters as a reader sees them (Unicode's grapheme clusters, regex's \\X), without a
    space at its end: a cut inside one would leave a family emoji's father alone, half a
    flag (a boxed letter), or a letter without its accent."""
    kept = 0
    for glyph in regex.finditer(r"\X", text[: limit + 1]):
        if glyph.end() > limit:
            break
        kept = glyph.end()
    return text[:kept].rstrip()
