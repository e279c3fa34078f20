"""The OpenAPI schema at ``/api/schema/``, generated once per process.

drf-spectacular's view generates the whole schema again on every request: about a second
of the server's CPU for a call anyone may make (the schema is public), and the suite's
route walks made it again and again. The schema is the code's, not the caller's (it is
served public: no endpoint is left out by who asks), so one generation per API version and
language serves every request until the process ends. A test that changes settings drops
it (``setting_changed``), so a schema read under changed settings is made under them.
"""

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils import translation
from drf_spectacular.views import SpectacularAPIView
from rest_framework.response import Response

_generated: dict[tuple, dict] = {}


class SchemaView(SpectacularAPIView):
    def _get_schema_response(self, request):
        version = self.api_version or request.version or self._get_version_parameter(request)
        key = (version, translation.get_language())
        if key not in _generated:
            generator = self.generator_class(
                urlconf=self.urlconf, api_version=version, patterns=self.patterns
            )
            _generated[key] = generator.get_schema(request=request, public=self.serve_public)
        filename = self._get_filename(request, version)
        return Response(
            data=_generated[key],
            headers={"Content-Disposition": f'inline; filename="{filename}"'},
        )


@receiver(setting_changed)
def forget_generated(**kwargs) -> None:
    _generated.clear()
