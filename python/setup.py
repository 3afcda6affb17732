"""Installs the wsync package with pip (offline, with Debian's setuptools, in a
virtual environment: setuptools writes build/ and an egg-info beside this
file); `make install-python VENV=DIR` copies it without either, and `make
install` where the system's python3 looks. It needs the wsync programs on PATH
and libwsync.so.0 beside them."""
from setuptools import setup

setup(
    name="wsync",
    version="0.1.0",
    description="Neural-network weights from a trainer to its workers (wsync's Python side)",
    packages=["wsync"],
    package_data={"wsync": ["py.typed"]},
    python_requires=">=3.9",
    install_requires=["numpy"],
)
