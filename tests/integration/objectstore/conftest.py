# lease_app.py is a script run by the tests in subprocesses, not a test module
collect_ignore = ["lease_app.py"]
