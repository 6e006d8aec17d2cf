/tmp/tg-ws-proxy-test-12859-0/image/root/usr/bin/tg-ws-proxy: line 1: ELF€^@è¯@@8@!: not found
