"""OAuth 2.1 resource server: the MCP authorization specification's server side.

Pure parts (:mod:`.tokens`, :mod:`.resource`) need nothing beyond the
library; token checking (:mod:`.jwt`, :mod:`.introspection`,
:mod:`.discovery`) needs the ``auth`` extra (PyJWT and httpx2).
"""
