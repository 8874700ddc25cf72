from aml_mcp.cli import main

raise SystemExit(main())
