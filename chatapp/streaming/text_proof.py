"""Proof that a page was sent a piece of an answer's text.

Every `delta` carries one: a MAC of the generation, the piece's offset in the generation's own
text (code points) and the piece itself, under the server's secret key. A web process that dies
between two partial saves leaves a stored text shorter than what its page was shown; the page
hands back the pieces past the stored end with their proofs (`POST .../recover`,
services.generation_recover), and what the user saw is kept. Without a valid proof nothing is
taken: a page cannot put words in the model's mouth, nor in the audit row.
"""

from django.utils.crypto import constant_time_compare, salted_hmac

from ..errors import ApiError
from ..request_input import MAX_CHARS
from ..services import SentPiece

_SALT = "chatapp.streaming.text_proof"
PROOF_HEX_DIGITS = 32  # 128 bits of HMAC-SHA256
MAX_PIECES = 1_000_000


class TextProof:
    """The proofs of one generation's pieces. Each piece is proven alone, by its offset, so that
    the relay and a resumed stream (which starts at an offset) prove alike, keeping no history."""

    def __init__(self, generation_id: int):
        self._keyed = salted_hmac(_SALT, f"{generation_id}:", algorithm="sha256")

    def of(self, offset: int, text: str) -> str:
        mac = self._keyed.copy()
        mac.update(f"{offset}:{text}".encode())
        return mac.hexdigest()[:PROOF_HEX_DIGITS]

    def holds(self, offset: int, text: str, proof: str) -> bool:
        return constant_time_compare(self.of(offset, text), proof)


def proven_pieces(listed, generation_id: int) -> list[SentPiece]:
    """A request's pieces of a generation's text, `[{"offset", "text", "proof"}, ...]`, each with
    the proof this server sent it with; else ApiError 400 (`invalid_proof` for a piece it did
    not send, `invalid_value` for anything not so shaped)."""
    if not isinstance(listed, list) or not 0 < len(listed) <= MAX_PIECES:
        raise ApiError(400, "invalid_value", f"pieces must be a list of 1 to {MAX_PIECES} pieces")
    proof, pieces = TextProof(generation_id), []
    for item in listed:
        item = item if isinstance(item, dict) else {}
        offset, text, said = item.get("offset"), item.get("text"), item.get("proof")
        if (isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_CHARS
                or not isinstance(text, str) or not text or not isinstance(said, str)):
            raise ApiError(400, "invalid_value",
                           'each piece is {"offset": an integer from 0, "text": a non-empty string, "proof"}')
        if not proof.holds(offset, text, said):
            raise ApiError(400, "invalid_proof", "a piece was not sent by this server as it stands")
        pieces.append(SentPiece(offset, text))
    return pieces
