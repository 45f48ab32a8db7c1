# the apps are scripts run by the crash tests in subprocesses, not test modules
# (they read their input and output from the environment when imported)
collect_ignore_glob = ["*_app.py"]
