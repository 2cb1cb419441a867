from rentwatch.cli import main

raise SystemExit(main())
