from llmgw.parent_death import arm

arm()

from llmgw.cli.main import main

main()
