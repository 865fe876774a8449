
€ 08€hpx€ˆ
node-a
node-z