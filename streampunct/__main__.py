"""``python -m streampunct``: the ``streampunct`` command (:func:`console`)."""

import sys


def console() -> int:
    """The ``streampunct`` command, with :mod:`streampunct.cli` loaded under watch: a stop signal
    while it loads ends the process as one during the command does (:func:`streampunct.cli.main`
    takes them from its first step): quietly, with 128 + the signal's number (130 after Ctrl-C,
    143 after SIGTERM, 129 after SIGHUP), where Python would print a ``KeyboardInterrupt``
    traceback or be killed by the signal. What comes before (Python starting, and the
    ``streampunct`` package's few imports) keeps Python's defaults."""
    import signal

    def loading(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    # SIGTERM and SIGHUP at their defaults (not ignored, as under nohup), for the import alone:
    # main() sets its own, which wait for a default to replace
    taken = [
        sig
        for sig in (getattr(signal, name, None) for name in ("SIGTERM", "SIGHUP"))
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL
    ]
    try:
        for sig in taken:
            signal.signal(sig, loading)
        from streampunct.cli import main
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    finally:
        for sig in taken:
            if signal.getsignal(sig) is loading:
                signal.signal(sig, signal.SIG_DFL)
    return main()


if __name__ == "__main__":
    sys.exit(console())
