from governor.observability.generate import main

raise SystemExit(main())
