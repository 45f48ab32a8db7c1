# the apps are scripts run by the crash tests in subprocesses, not test modules
# (they read their input and output from the environment when imported); the
# modules they share import each other as siblings (``rivermark run`` puts an
# app's directory on sys.path), which collection does not
collect_ignore_glob = ["*_app.py"]
collect_ignore = ["sinkjob.py"]
