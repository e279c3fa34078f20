"""URL converters. ``<key:…>`` matches task, spec and decision keys and project slugs
(``FM-12``, ``FM-S3``, ``FM-D7``, ``FM``), and ``<id:…>`` ids and version numbers that
fit the database: anything else never reaches a view, so a hostile address (a NUL
byte, a slash, a 40-digit id) is a plain 404."""

from django.urls import register_converter

from projects.numbers import IdConverter


class KeyConverter:
    regex = r"[A-Za-z0-9][A-Za-z0-9-]{0,31}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(KeyConverter, "key")

register_converter(IdConverter, "id")
