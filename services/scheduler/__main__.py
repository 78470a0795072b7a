"""`python -m services.scheduler worker -l warn` runs one scheduler worker.

What a worker that stopped answering is doing, without stopping it: `kill -USR1 <pid>`
writes every asyncio task's stack to its stderr (Faust's worker, while its event loop
runs), `kill -QUIT <pid>` every thread's Python stack (also when the loop is blocked)."""

import faulthandler
import signal

from services.scheduler.app import create_app

app = create_app()

if __name__ == "__main__":
    faulthandler.register(signal.SIGQUIT, all_threads=True)
    app.main()
