"""Fault injection: a tokenizer that raises an error nobody planned for, as a bug would."""


class UnplannedError(RuntimeError):
    pass


class RaisingTokenizer:
    def apply_chat_template(self, *args, **kwargs):
        raise UnplannedError("injected fault in the tokenizer")
