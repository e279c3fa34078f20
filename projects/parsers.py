"""The API's body parser, kept apart from ``projects.rest``.

DRF reads ``DEFAULT_PARSER_CLASSES`` when ``rest_framework.views`` is imported, which
``projects.rest`` itself imports: the parser must live in a module that does not.
"""

from rest_framework import exceptions, parsers


class JSONParser(parsers.JSONParser):
    """The API's one body parser ("JSON over HTTPS"; only evidence uploads are multipart).

    DRF's parser turns only ``ValueError`` into a 400; JSON nested deeper than Python's
    recursion limit (``[[[[…``) raises ``RecursionError``, which would answer 500.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply") from None
