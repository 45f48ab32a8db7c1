# the apps are scripts run by the crash tests in subprocesses, not test modules
collect_ignore = ["pipeline_app.py"]
