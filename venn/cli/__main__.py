from venn.cli import main

main()
