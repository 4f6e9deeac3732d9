"""python -m train --config train/configs/<name>.yaml [--set key=value ...] --out runs/<name>"""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
