"""Runs localstripe on 127.0.0.1 only, keeping nothing on disk.

`localstripe --port P` binds every interface and pickles its whole store to one fixed file
in /tmp after every write (shared by every instance on the machine); the tests want neither.
Usage: python localstripe_server.py PORT
"""
import sys

from aiohttp import web
from localstripe import server
from localstripe.resources import store

store.dump_to_disk = lambda: None
web.run_app(server.app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
