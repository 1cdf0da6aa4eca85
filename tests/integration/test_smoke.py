def test_login_and_create_task(api):
    user = api.user()
    r = user.post(
        "/api/tasks",
        json={"name": "t", "targets": ["192.0.2.0/28", "example.com"], "ports": "22,80"},
    )
    assert r.status_code == 201, r.get_json()
    task = r.get_json()["task"]
    assert task["execution_count"] == 2
    scanner = api.scanner()
    r = scanner.claim()
    assert r.status_code == 200, r.get_json()


def test_close_app_closes_the_search_store_it_opened(settings, engine):
    from app import close_app, create_app
    from app.http import context
    from tests.support.stores import install

    application = create_app(settings, engine=engine, modules="off")
    # Opened by create_app before any request: no lazy, unlocked first-use init.
    opened = application.extensions[context.STORE]
    assert opened is not None and context.OBJECT_STORE in application.extensions
    store = install(application)
    assert store.inner is opened
    with application.app_context():
        assert context.store() is store
    close_app(application)
    assert "close" in store.names()
    assert context.STORE not in application.extensions
    assert context.OBJECT_STORE not in application.extensions
