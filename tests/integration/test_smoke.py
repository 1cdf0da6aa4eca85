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
