from tests.integration.object_store.conftest import fault_proxy, s3_server_url  # noqa: F401
